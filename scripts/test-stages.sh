#!/usr/bin/env bash
# Runs `make STAGE` for each stage named, in order, timing each, and prints a
# table of the times at the end: what `make test` is made of, so that a
# stage that grows slow is seen in every run. A failed stage does not stop
# the later ones (each reports what it can), but the run fails, and after
# the table each failed stage's lines that say why are printed again: a
# reader of the run's last lines (a CI log's tail) sees the failed unit
# test or integration test, not only the stage's name.
# Stages joined by commas (a,b,c) run side by side, each timed on its own,
# its output printed whole when it ends: work that leaves the CPU idle (the
# torch 1.13 integration pass waits on processes more than it computes)
# takes the others along in its time.
# Within a group, stages joined by plus signs (a+b) run one after the
# other, each timed on its own: the sanitizers' build, then their tests,
# beside the integration pass that does not need them. A chain stops at a
# stage that failed; the stages after it are shown as skipped.
# A stage may be named once (its log and time are kept under its name).
# Usage: scripts/test-stages.sh STAGE[+STAGE...][,STAGE[+STAGE...]...]...
set -u
names=() times=() results=()
failed=0
start=$SECONDS
logs=$(mktemp -d) || exit 2
# Each stage writes through tee, so its tools see a pipe; on a terminal they
# are told to colour as they would there (pytest, ninja; the unit tests
# write to files that unit-shards.py reads). The lines that say why are read
# with colour taken off.
if [ -t 1 ]; then
  export PY_COLORS=1 CLICOLOR_FORCE=1
fi
trap 'rm -rf "$logs"' EXIT
# One chain of a group (stages joined by +), one stage after the other:
# each one's output to its log, printed whole at its end (under a lock, so
# that two ends never mix), then its time and result.
side_by_side() {
  local stage t0 rc=0
  local -a chain
  IFS=+ read -r -a chain <<<"$1"
  for stage in "${chain[@]}"; do
    if [ "$rc" != 0 ]; then
      echo "0 skipped" >"$logs/$stage.end"
      continue
    fi
    t0=$SECONDS
    make --no-print-directory "$stage" >"$logs/$stage" 2>&1
    rc=$?
    flock "$logs/.print" cat "$logs/$stage"
    echo "$((SECONDS - t0)) $rc" >"$logs/$stage.end"
  done
}
IFS=' ,+' read -r -a all <<<"$*"
if [ "$(printf '%s\n' "${all[@]}" | sort | uniq -d)" ]; then
  echo "test-stages: a stage is named twice in: $*" >&2
  exit 2
fi
for group in "$@"; do
  IFS=, read -r -a chains <<<"$group"
  IFS=,+ read -r -a stages <<<"$group"
  if [ "${#stages[@]}" = 1 ]; then
    stage=${stages[0]} t0=$SECONDS
    make --no-print-directory "$stage" 2>&1 | tee "$logs/$stage"
    echo "$((SECONDS - t0)) ${PIPESTATUS[0]}" >"$logs/$stage.end"
  else
    for chain in "${chains[@]}"; do side_by_side "$chain" & done
    wait
  fi
  for stage in "${stages[@]}"; do
    # A stage that left no end (killed, a full disk) failed.
    took=0 rc=missing
    read -r took rc <"$logs/$stage.end"
    case $rc in
      0) r=ok ;;
      skipped) r=skipped ;;
      *) r=FAILED failed=1 ;;
    esac
    names+=("$stage") times+=("$took") results+=("$r")
  done
done
echo
echo "== make test: time per stage"
for i in "${!names[@]}"; do
  printf '   %-22s %4dm%02ds  %s\n' "${names[$i]}" $((times[i] / 60)) $((times[i] % 60)) "${results[$i]}"
done
for group in "$@"; do
  case $group in
    *,*+* | *+*,*) echo "   (side by side: ${group//,/, }; a+b is a, then b)" ;;
    *,*) echo "   (side by side: ${group//,/, })" ;;
  esac
done
total=$((SECONDS - start))
printf '   %-22s %4dm%02ds  %s\n' total $((total / 60)) $((total % 60)) "$([ $failed = 0 ] && echo ok || echo FAILED)"
# What says why, most telling first (a failed test's own captured output
# may hold lines of any kind; the summaries come before it): pytest's
# summary lines; GoogleTest's failed tests, their failure lines and a shard
# that died (unit-shards.py); a sanitizer's or libFuzzer's report; the
# layering check's findings; a compiler's, ninja's, CMake's or mypy's error;
# make's own last word.
why=(
  '^(FAILED|ERROR) '
  '^\[  FAILED  \] |: Failure$|^unit shard |^the shards ran|before its summary'
  'runtime error:|ERROR: (Address|Leak|Thread|UndefinedBehavior)Sanitizer|ERROR: libFuzzer|Test unit written|^SUMMARY: '
  '^check-layers: '
  '^FAILED: |^CMake Error|^[^ :]+:[0-9]+(:[0-9]+)?: (fatal )?error:'
  '^make.*\*\*\* '
)
for i in "${!names[@]}"; do
  [ "${results[$i]}" = FAILED ] || continue
  echo "== why ${names[$i]} failed (its lines that say so; the whole output is above)"
  sed -E $'s/\x1b\\[[0-9;]*[mK]//g' "$logs/${names[$i]}" > "$logs/plain"
  for pattern in "${why[@]}"; do grep -E "$pattern" "$logs/plain"; done |
    awk '!seen[$0]++' | head -40
done
exit $failed
