#!/usr/bin/env bash
# tests/pipeline_migration_test.sh TERNRUN EXAMPLE: the C migration example
# (examples/pipeline_migration.c) moves layers between running stages in both
# directions, and two disjoint pairs at once, and ends with final weights
# bitwise equal to the same run without migration; its event lines say that
# each migration's message, push and install happened at the iteration the
# protocol names (message and push at k, install before forward k+1).
set -euo pipefail
ternrun=$1 example=$2
dir=$(mktemp -d /tmp/tern-migration-XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

scenario() {  # name nranks layers iters migrations...
  local name=$1 n=$2 layers=$3 iters=$4
  shift 4
  local args=()
  for m in "$@"; do args+=(--migrate "$m"); done
  mkdir -p "$dir/$name/mig" "$dir/$name/ref"
  "$ternrun" -n "$n" "$example" --layers "$layers" --iters "$iters" "${args[@]}" \
    --save "$dir/$name/mig" > "$dir/$name/mig.log" 2>&1 || { cat "$dir/$name/mig.log"; fail "$name: run"; }
  "$ternrun" -n "$n" "$example" --layers "$layers" --iters "$iters" \
    --save "$dir/$name/ref" > "$dir/$name/ref.log" 2>&1 || { cat "$dir/$name/ref.log"; fail "$name: reference"; }
  local files
  files=$(ls "$dir/$name/ref" | wc -l)
  [ "$files" = "$layers" ] || fail "$name: $files layer files, want $layers"
  for f in "$dir/$name/ref"/*; do
    cmp -s "$f" "$dir/$name/mig/$(basename "$f")" || fail "$name: $(basename "$f") differs from the run without migration"
  done
  for m in "$@"; do  # ITER:FROM:TO:N
    IFS=: read -r k from to nl <<< "$m"
    grep -q "^\[$from\] \[$from\] iter $k: migration message to stage $to: $nl layer" "$dir/$name/mig.log" ||
      fail "$name: no migration message from $from at iteration $k"
    grep -q "^\[$from\] \[$from\] iter $k: pushed layers .* as version $((k + 1))$" "$dir/$name/mig.log" ||
      fail "$name: stage $from did not push version $((k + 1)) at iteration $k"
    grep -q "^\[$to\] \[$to\] iter $k: installed layers .* version $((k + 1)) before forward $((k + 1))$" \
      "$dir/$name/mig.log" || fail "$name: stage $to did not install version $((k + 1)) before forward $((k + 1))"
  done
  echo "$name: bitwise equal, events at the right iterations"
}

scenario rightward-then-leftward 3 6 8 3:1:2:1 5:2:1:2
scenario two-pairs-at-once 4 8 6 2:0:1:1 2:3:2:1
# A migration that would empty a stage is refused with a sentence, not run.
if "$ternrun" -n 3 "$example" --layers 3 --iters 2 --migrate 0:1:2:1 > "$dir/bad.log" 2>&1; then
  fail "emptying a stage was accepted"
fi
grep -q "would leave its stage without layers" "$dir/bad.log" || { cat "$dir/bad.log"; fail "no sentence"; }
echo "PASS"
