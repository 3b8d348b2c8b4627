#!/usr/bin/env bash
# tests/readme/readme_commands.sh — suite readme: every command the README shows runs.
#
#   readme_commands.sh README CLI SOURCE_ROOT
#
# Extracts each command of the README: every line of its ```sh blocks (a line ending in `\` is
# joined with the next; `# ...` comments dropped) and every inline `scripts/...` or `mla-h2o ...`
# command of the text (backticks). Each must be a row of the table below, which says how the
# suite runs it:
#   run       the command as shown (`mla-h2o` is the CLI of this build), from SOURCE_ROOT
#   cut CMD   a shorter form of the same command, with the reason (the README tables' jobs take
#             minutes); the command as shown is also run with --dry-run, so that it still parses
#             and plans
#   as CMD    another spelling of the same work (the scripts' set-up and build are what the
#             suite's own build already did)
#   skip WHY  not run here, and why
# The suite fails when a command exits non-zero (or is no longer found), and when the README
# shows a command the table does not know (so a new command needs a row, and a changed one too).
# Each command runs under `timeout`, its outputs in a scratch directory.
set -u
readme=$1 cli=$2 root=$3
scratch=$(mktemp -d "${TMPDIR:-/tmp}/mla-readme.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
cd "$root" || exit 1

declare -A how why
row() { how["$1"]=$2; why["$1"]=$3; }
O="--out $scratch/out"
build=$(cd "$(dirname "$cli")/../.." && pwd)
D="MLA_DEMO_BUILD=$build"
row 'scripts/demo' "as $D scripts/demo $O" \
  'the script itself on this build (MLA_DEMO_BUILD: no set-up and no second build), its outputs in the scratch directory'
row 'scripts/demo --model tiny' "as $D scripts/demo --model tiny $O" 'as scripts/demo'
row 'scripts/demo --model recall' "as $D scripts/demo --model recall $O" 'as scripts/demo'
row 'mla-h2o demo --model recall' skip 'what scripts/demo --model recall runs (above)'
row 'scripts/test' skip 'the suite itself: it would run this test again'
row 'mla-h2o eval --checkpoint models/tiny-mla --text models/tiny-mla/eval/heldout-corpus --windows 32 --prompt-len 256 --steps 256 --cache-budget 96,128,192 --compress decode' \
  "cut mla-h2o eval --checkpoint models/tiny-mla --text models/tiny-mla/eval/heldout-corpus --windows 2 --prompt-len 256 --steps 256 --cache-budget 96,128,192 --compress decode --policy h2o,tova $O" \
  '32 windows x 18 policies take about 3 min on 2 cores; 2 windows and 2 policies run the same path in seconds'

# The README's commands, one per line.
commands() {
  awk '
    /^```sh[[:space:]]*$/ { inblock = 1; line = ""; next }
    /^```/ { inblock = 0; next }
    inblock {
      sub(/[[:space:]]+#.*$/, ""); sub(/^#.*$/, "")
      if ($0 ~ /\\[[:space:]]*$/) { sub(/\\[[:space:]]*$/, ""); line = line $0 " "; next }
      line = line $0
      gsub(/[[:space:]]+/, " ", line); sub(/^ /, "", line); sub(/ $/, "", line)
      if (line != "") print line
      line = ""
    }' "$readme"
  # inline commands: `scripts/...` or `mla-h2o <subcommand> ...` (not the error format `mla-h2o <cmd>: ...`)
  grep -o '`\(scripts/[^`]*\|mla-h2o [a-z][^`]*\)`' "$readme" | tr -d '`' | grep -v ': error:'
}

passed=0 failed=0
run_one() {  # run_one LABEL COMMAND
  local label=$1 cmd=$2 log="$scratch/log"
  rm -rf "$scratch/out"
  local line=${cmd//mla-h2o /\"$cli\" }
  timeout 300 bash -c "$line" > "$log" 2>&1
  local rc=$?
  if [ $rc -eq 0 ]; then
    passed=$((passed + 1)); echo "ok      $label: $cmd"
  else
    failed=$((failed + 1)); echo "FAILED  $label: $cmd (exit $rc$([ $rc -eq 124 ] && echo ', timed out'))"
    tail -5 "$log" | sed 's/^/        /'
  fi
}

mapfile -t shown < <(commands | awk '!seen[$0]++')
[ ${#shown[@]} -gt 0 ] || { echo "no command found in $readme"; exit 1; }
for c in "${shown[@]}"; do
  if [ -z "${how[$c]+x}" ]; then
    failed=$((failed + 1)); echo "FAILED  unknown: the README shows a command this table does not know: $c"; continue
  fi
  case "${how[$c]}" in
    run) run_one run "$c" ;;
    skip) echo "skip    $c (${why[$c]})" ;;
    as\ *) echo "        (${why[$c]})"; run_one as "${how[$c]#as }" ;;
    cut\ *) echo "        (${why[$c]})"; run_one cut "${how[$c]#cut }"; run_one dry-run "$c --dry-run" ;;
  esac
done
echo "readme: ${#shown[@]} commands shown, $passed passed, $failed failed"
[ "$failed" -eq 0 ]
