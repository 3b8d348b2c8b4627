// The Boost.Test module of unit_tests. Suites live in test_<suite>.cpp, one per file.
#define BOOST_TEST_MODULE mla_h2o
#include <boost/test/unit_test.hpp>
