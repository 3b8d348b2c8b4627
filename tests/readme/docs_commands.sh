#!/usr/bin/env bash
# tests/readme/docs_commands.sh — suite readme: every mla-h2o command that docs/*.md shows parses.
#
#   docs_commands.sh DOCS_DIR CLI
#
# The commands of the docs name checkpoints that are not here (/data/Kimi-K2.6, a DeepSeek-V2-Lite
# directory), so they are checked at the level of `--help`: each line of a code block that starts
# with `mla-h2o SUBCOMMAND` (or `build/src/cli/mla-h2o`, `$ mla-h2o`; a line ending in `\` is
# joined with the next, `# ...` comments dropped; output lines `mla-h2o NAME: ...` are not
# commands) must name a subcommand that exists, and every `--flag` it passes must be one that
# `mla-h2o SUBCOMMAND --help` lists. A renamed or removed flag in the CLI then fails here until
# the docs follow. (The README's own commands are run, not only parsed: readme_commands.sh.)
set -u
docs=$1 cli=$2

commands() {  # FILE: its commands, one per line, prefixed with FILE:LINE
  awk -v file="$1" '
    /^[[:space:]]*```/ { inblock = !inblock; line = ""; next }
    inblock {
      text = $0
      if (line == "") {
        if (text !~ /^[[:space:]]*(\$ )?(build\/src\/cli\/)?mla-h2o [a-z]+( |$)/) next
        start = NR
      }
      sub(/[[:space:]]+#.*$/, "", text)
      if (text ~ /\\[[:space:]]*$/) { sub(/\\[[:space:]]*$/, "", text); line = line text " "; next }
      line = line text
      gsub(/[[:space:]]+/, " ", line); sub(/^ /, "", line); sub(/^\$ /, "", line); sub(/^build\/src\/cli\//, "", line)
      n = split(line, part, / && /)  # `a && b`: two commands
      for (i = 1; i <= n; i++) {
        sub(/^build\/src\/cli\//, "", part[i])
        if (part[i] ~ /^mla-h2o [a-z]+/) print file ":" start ": " part[i]
      }
      line = ""
    }' "$1"
}

declare -A help
checked=0 failed=0
for f in "$docs"/*.md; do
  while IFS= read -r entry; do
    where=${entry%%: mla-h2o *}
    cmd=${entry#*: }
    sub=$(awk '{print $2}' <<< "$cmd")
    if [ -z "${help[$sub]+x}" ]; then
      help[$sub]=$("$cli" "$sub" --help 2>&1) || help[$sub]="__unknown__"
    fi
    checked=$((checked + 1))
    if [ "${help[$sub]}" = "__unknown__" ]; then
      failed=$((failed + 1)); echo "FAILED  $where: no subcommand '$sub': $cmd"; continue
    fi
    for flag in $(grep -oE '(^| )--[a-z][a-z0-9-]*' <<< "$cmd" | tr -d ' ' | sort -u); do
      if ! grep -qE -- "(^|[^a-z0-9-])$flag([^a-z0-9-]|$)" <<< "${help[$sub]}"; then
        failed=$((failed + 1)); echo "FAILED  $where: '$sub' has no flag $flag: $cmd"
      fi
    done
  done < <(commands "$f")
done
echo "docs: $checked commands checked, $failed failures"
[ "$checked" -gt 0 ] && [ "$failed" -eq 0 ]
