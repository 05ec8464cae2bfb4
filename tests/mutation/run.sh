#!/usr/bin/env bash
# tests/mutation/run.sh: the mutation harness (docs/mutation.md): applies each planted fault of
# tests/mutation/faults/ to a scratch copy of the tree, rebuilds it, and runs the tests meant to kill it.
set -euo pipefail
# The whole script is one compound command, read before any of it runs: editing this file during
# a long run cannot change what the running harness does next (a fault is read when it is applied).
{

usage() {
  cat <<'EOF'
usage: tests/mutation/run.sh [options] [fault ...]

Applies each fault (tests/mutation/faults/NN-name.patch; all of them when none is named) to a
scratch copy of this working tree, rebuilds incrementally, runs the fault's "# kill:" tests in
order (cheapest first) and stops at the first failure. Prints, a line a fault:
  killed by <test[:case]> | survived | build failed | patch does not apply
  (or "bad kill test <test[:case]>" when a kill test names no test or no case)

A fault is named by its number (07), its name (flags-wait-relaxed), both (07-flags-wait-relaxed)
or a path to a patch file.

options:
  --jobs N        ninja's parallel jobs (default 2); faults run one after another
  --timeout S     wall-clock bound on one test run, seconds (default 600); a test that hangs
                  past it counts as failed (killed), marked "(timeout)"
  --table FILE    also write the results as a markdown table to FILE
  --family F      only the faults of family F (repeatable)
  --build-only    apply and build each fault, run no test (checks that the patches still apply
                  and build)
  --baseline      first run every selected fault's kill tests on the unmutated tree: a killer
                  that fails there makes every verdict it gives meaningless
  --base B        what the faults are applied to: worktree (default: HEAD plus the working
                  tree's uncommitted changes and untracked files) or head (the last commit only,
                  for when the working tree is half-way through an edit)
  --scratch DIR   where the scratch copy (DIR/src) and its build (DIR/build) live
                  (default: $HSAMONO_MUTATION_DIR, else /tmp/hsamono-mutation)
  --list          list the faults (number, family, killers) and exit
  -h, --help      this text
EOF
}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(git -C "$here" rev-parse --show-toplevel)
faults_dir="$here/faults"
jobs=2
timeout_s=600
table=""
build_only=0
baseline=0
list_only=0
base_kind=worktree
scratch="${HSAMONO_MUTATION_DIR:-/tmp/hsamono-mutation}"
families=()
wanted=()

while [ $# -gt 0 ]; do
  case "$1" in
    --jobs) jobs="$2"; shift 2 ;;
    --timeout) timeout_s="$2"; shift 2 ;;
    --table) table="$2"; shift 2 ;;
    --family) families+=("$2"); shift 2 ;;
    --build-only) build_only=1; shift ;;
    --baseline) baseline=1; shift ;;
    --scratch) scratch="$2"; shift 2 ;;
    --base) base_kind="$2"; shift 2 ;;
    --list) list_only=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; wanted+=("$@"); break ;;
    -*) echo "run.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) wanted+=("$1"); shift ;;
  esac
done
case "$jobs" in ''|*[!0-9]*) echo "run.sh: --jobs takes a number" >&2; exit 2 ;; esac
case "$base_kind" in worktree|head) ;; *) echo "run.sh: --base is worktree or head" >&2; exit 2 ;; esac
case "$timeout_s" in ''|*[!0-9]*) echo "run.sh: --timeout takes seconds" >&2; exit 2 ;; esac

src="$scratch/src"
build="$scratch/build"
logs="$scratch/logs"

# ---------------------------------------------------------------- the faults

# A fault's header: '#' lines before its diff (git apply and patch skip text before the first
# "diff --git"): a one-line description, then "# family: F", "# kill: test[:case] ...", and
# optionally "# timeout: S" (a hang is expected; S bounds each test run) and "# note: ...".
header_field() { # file field
  sed -n "s/^# $2: //p" "$1" | head -n 1
}
description() {
  sed -n '1s/^# //p' "$1"
}

resolve() { # a fault's name as given -> its patch file
  local w="$1" f
  if [ -f "$w" ]; then (cd "$(dirname "$w")" && echo "$PWD/$(basename "$w")"); return; fi
  for f in "$faults_dir"/*.patch; do
    local b; b=$(basename "$f" .patch)
    if [ "$b" = "$w" ] || [ "${b%%-*}" = "$w" ] || [ "${b#*-}" = "$w" ]; then echo "$f"; return; fi
  done
  echo "run.sh: no fault named $w" >&2
  return 1
}

selected=()
if [ ${#wanted[@]} -eq 0 ]; then
  for f in "$faults_dir"/*.patch; do selected+=("$f"); done
else
  for w in "${wanted[@]}"; do selected+=("$(resolve "$w")"); done
fi
if [ ${#families[@]} -gt 0 ]; then
  keep=()
  for f in "${selected[@]}"; do
    fam=$(header_field "$f" family)
    for want in "${families[@]}"; do [ "$fam" = "$want" ] && keep+=("$f"); done
  done
  selected=("${keep[@]+"${keep[@]}"}")
fi
if [ ${#selected[@]} -eq 0 ]; then echo "run.sh: no fault selected" >&2; exit 2; fi

if [ "$list_only" = 1 ]; then
  for f in "${selected[@]}"; do
    printf '%-34s %-10s %s\n' "$(basename "$f" .patch)" "$(header_field "$f" family)" "$(header_field "$f" kill)"
  done
  exit 0
fi

# ---------------------------------------------------------------- the scratch copy

# The scratch is a git clone of this repository whose commit refs/mutation/base holds the working
# tree as it is now: HEAD, plus the uncommitted changes, plus untracked (not ignored) files. It is
# built as a commit (a temporary index, nothing written to the working copy) so that resetting to
# it rewrites only the files that differ, and ninja rebuilds only what they touch.
say() { printf '%s\n' "$*" >&2; }

make_base() {
  mkdir -p "$scratch" "$logs"
  if [ ! -d "$src/.git" ]; then
    say "mutation: cloning $repo into $src"
    git clone -q --no-checkout "$repo" "$src"
  fi
  git -C "$src" fetch -q "$repo" HEAD
  local head; head=$(git -C "$src" rev-parse FETCH_HEAD)
  local index="$scratch/base.index"
  rm -f "$index"
  GIT_INDEX_FILE="$index" git -C "$src" read-tree "$head"
  # the uncommitted changes of tracked files, staged and not (the harness's own files excluded:
  # editing a fault must not change the tree every fault is built from)
  : >"$scratch/base.diff"
  [ "$base_kind" = worktree ] && git -C "$repo" diff --binary HEAD -- . ':(exclude)tests/mutation' >"$scratch/base.diff"
  if [ -s "$scratch/base.diff" ]; then
    GIT_INDEX_FILE="$index" git -C "$src" apply --cached --whitespace=nowarn "$scratch/base.diff"
  fi
  # untracked files that are not ignored (new sources a meson.build may already name)
  local f sha mode
  while IFS= read -r -d '' f; do
    sha=$(git -C "$src" hash-object -w --stdin <"$repo/$f")
    mode=100644
    [ -x "$repo/$f" ] && mode=100755
    GIT_INDEX_FILE="$index" git -C "$src" update-index --add --cacheinfo "$mode,$sha,$f"
  done < <([ "$base_kind" = head ] || git -C "$repo" ls-files -z --others --exclude-standard -- . ':(exclude)tests/mutation')
  local tree; tree=$(GIT_INDEX_FILE="$index" git -C "$src" write-tree)
  rm -f "$index"
  local old; old=$(git -C "$src" rev-parse -q --verify 'refs/mutation/base^{tree}' || true)
  if [ "$old" != "$tree" ] || [ "$(git -C "$src" rev-parse -q --verify 'refs/mutation/base^' || true)" != "$head" ]; then
    local commit
    commit=$(git -C "$src" -c user.name=mutation -c user.email=mutation@localhost \
      commit-tree "$tree" -p "$head" -m "mutation base ($base_kind): $head")
    git -C "$src" update-ref refs/mutation/base "$commit"
  fi
  base_head=$head
  if [ "$base_kind" = head ]; then
    base_dirty="HEAD only"
  elif [ -s "$scratch/base.diff" ] || git -C "$repo" ls-files --others --exclude-standard -- . ':(exclude)tests/mutation' | grep -q .; then
    # the base tree's hash names the uncommitted state the results came from
    base_dirty="with uncommitted changes, tree ${tree:0:12}"
  else
    base_dirty="clean"
  fi
}

# Back to the base, whatever a fault did (files it added included; the build dir is outside).
reset_scratch() {
  git -C "$src" reset -q --hard refs/mutation/base
  git -C "$src" clean -fdq
}

setup() {
  make_base
  reset_scratch
  if [ ! -f "$build/build.ninja" ]; then
    say "mutation: configuring $build (--werror)"
    meson setup --werror "$build" "$src" >"$logs/setup.log" 2>&1 || {
      say "mutation: meson setup failed, see $logs/setup.log"; exit 1; }
  fi
  say "mutation: building the base (${base_head:0:12}, $base_dirty)"
  ninja -C "$build" -j "$jobs" >"$logs/base-build.log" 2>&1 || {
    say "mutation: the base tree does not build, see $logs/base-build.log"; exit 1; }
  # each test's declared timeout, so meson's own bound can be set to --timeout (meson then
  # reports TIMEOUT and kills the test's process group itself)
  meson introspect --tests "$build" | python3 -c '
import json, sys
for t in json.load(sys.stdin):
    print(t["name"], t["timeout"] or 0)' >"$scratch/timeouts"
}

# ---------------------------------------------------------------- running a test

runner_pid=""
on_signal() {
  # meson cancels its running tests (their own process groups) on SIGTERM
  if [ -n "$runner_pid" ]; then kill -TERM "$runner_pid" 2>/dev/null || true; wait "$runner_pid" 2>/dev/null || true; fi
  if [ -d "$src/.git" ]; then reset_scratch || true; fi
  say "mutation: interrupted; the scratch copy is back at its base"
  exit 130
}
trap on_signal INT TERM

# run_test SPEC LOG BOUND: SPEC is name or name:case; BOUND the run's time limit in seconds. Returns 0 when the test passed, 1 when it failed;
# sets `why` to what else is worth saying ("timeout", ...). Not run in a subshell: `wait` on the
# background meson is what lets the INT/TERM trap run while a test does.
why=""
run_test() {
  local spec="$1" log="$2" bound="$3" name="${1%%:*}" case="" declared mult rc=0
  why=""
  [ "$spec" != "$name" ] && case="${spec#*:}"
  declared=$(awk -v n="$name" '$1 == n { print $2 }' "$scratch/timeouts")
  if [ -z "$declared" ]; then
    echo "run.sh: no test named $name in $build" >>"$log"
    why="no such test"
    return 1
  fi
  [ "$declared" -gt 0 ] 2>/dev/null || declared=30
  mult=$(awk -v s="$bound" -v d="$declared" 'BEGIN { printf "%.4f", s / d }')
  echo "=== $spec (meson test $name, CK_RUN_CASE=${case:-<all cases>}, bound ${bound} s)" >>"$log"
  # meson's bound is the one that counts (-t scales the test's declared timeout to --timeout);
  # the outer one only catches meson itself wedging. CK_RUN_CASE only when a case is named: an
  # empty one would select no case at all, and pass.
  local -a envs=(env -u CK_RUN_SUITE -u CK_RUN_CASE)
  [ -n "$case" ] && envs+=("CK_RUN_CASE=$case")
  "${envs[@]}" timeout -k 30 $((bound + 120)) \
    meson test -C "$build" --no-rebuild --print-errorlogs -t "$mult" "$name" >>"$log" 2>&1 &
  runner_pid=$!
  wait "$runner_pid" || rc=$?
  runner_pid=""
  local testlog="$build/meson-logs/testlog.txt"
  if [ "$rc" -ne 0 ]; then
    # meson's result line, e.g. " 1/1 hsa-mono:layer / ffn  TIMEOUT  600.02s" (the word alone would
    # also match CK_DEFAULT_TIMEOUT in the printed environment)
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] || tail -n 60 "$log" | grep -Eq '^ *[0-9]+/[0-9]+ .* TIMEOUT +[0-9.]+s'; then
      why="timeout"
    fi
    return 1
  fi
  # a case name that matches nothing runs zero checks and passes: say so rather than count it
  if [ -n "$case" ] && [ -f "$testlog" ] && grep -q 'Checks: 0,' "$testlog"; then
    echo "run.sh: CK_RUN_CASE=$case selected no case of $name" >>"$log"
    why="no such case"
    return 1
  fi
  return 0
}

# ---------------------------------------------------------------- main

setup
stamp=$(date -u +%Y-%m-%dT%H:%MZ)
say "mutation: ${#selected[@]} fault(s) against ${base_head:0:12} ($base_dirty), scratch $scratch"

if [ "$baseline" = 1 ] && [ "$build_only" = 0 ]; then
  declare -A seen=()
  bad=0
  for f in "${selected[@]}"; do
    for spec in $(header_field "$f" kill); do
      [ -n "${seen[$spec]+x}" ] && continue
      seen[$spec]=1
      log="$logs/baseline.log"
      t0=$SECONDS
      if run_test "$spec" "$log" "$timeout_s"; then
        say "baseline: $spec passes ($((SECONDS - t0)) s)"
      else
        say "baseline: $spec FAILS on the unmutated tree${why:+ ($why)}: see $log"
        bad=1
      fi
    done
  done
  [ "$bad" = 0 ] || { say "mutation: a kill test fails without any fault; verdicts would mean nothing"; exit 1; }
fi

results=()
n_killed=0 n_survived=0 n_build=0 n_apply=0 n_built=0 n_bad=0
for f in "${selected[@]}"; do
  id=$(basename "$f" .patch)
  family=$(header_field "$f" family)
  kills=$(header_field "$f" kill)
  # a fault expected to hang says how long a healthy run of its tests takes at most ("# timeout:"),
  # so the hang is called without waiting out the full --timeout
  bound=$(header_field "$f" timeout)
  case "$bound" in ''|*[!0-9]*) bound=$timeout_s ;; esac
  [ "$bound" -gt "$timeout_s" ] && bound=$timeout_s
  log="$logs/$id.log"
  : >"$log"
  t0=$SECONDS
  reset_scratch
  verdict="" by=""
  if ! git -C "$src" apply --check "$f" >>"$log" 2>&1; then
    verdict="patch does not apply"; n_apply=$((n_apply + 1))
  else
    git -C "$src" apply "$f"
    if ! ninja -C "$build" -j "$jobs" >>"$log" 2>&1; then
      verdict="build failed"; n_build=$((n_build + 1))
    elif [ "$build_only" = 1 ]; then
      verdict="builds"; n_built=$((n_built + 1))
    else
      bad=""
      for spec in $kills; do
        if ! run_test "$spec" "$log" "$bound"; then
          # a kill test that names no test or no case proves nothing: an error, not a kill
          case "$why" in "no such test"|"no such case") bad="$spec ($why)" ;; *) by="$spec${why:+ ($why)}" ;; esac
          break
        fi
      done
      if [ -n "$bad" ]; then
        verdict="bad kill test $bad"; n_bad=$((n_bad + 1))
      elif [ -n "$by" ]; then
        verdict="killed by $by"; n_killed=$((n_killed + 1))
      else
        verdict="survived"; n_survived=$((n_survived + 1))
      fi
    fi
  fi
  reset_scratch
  secs=$((SECONDS - t0))
  printf '%-34s %-10s %s (%d s)\n' "$id" "$family" "$verdict" "$secs"
  results+=("$id|$family|$verdict|$kills|$secs")
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$stamp" "${base_head:0:12}" "$id" "$family" "$verdict" "$secs" >>"$scratch/history.tsv"
done

total=${#selected[@]}
if [ "$build_only" = 1 ]; then
  summary="$total faults: $n_built build, $n_build build failed, $n_apply do not apply"
else
  summary="$total faults: $n_killed killed, $n_survived survived, $n_build build failed, $n_apply do not apply"
  [ "$n_bad" -gt 0 ] && summary="$summary, $n_bad with a bad kill test"
fi
echo "$summary"

if [ -n "$table" ]; then
  {
    echo "Run $stamp against ${base_head:0:12} ($base_dirty), \`--timeout $timeout_s\`: $summary."
    echo
    echo "| fault | family | verdict | kill tests (in order) | s |"
    echo "|---|---|---|---|---|"
    for r in "${results[@]}"; do
      IFS='|' read -r id family verdict kills secs <<<"$r"
      printf '| %s | %s | %s | %s | %s |\n' "$id" "$family" "$verdict" "$kills" "$secs"
    done
  } >"$table"
  say "mutation: table written to $table"
fi

# a harness run that completed is a success whatever the verdicts (survivors are findings)
if [ "$n_build" -eq 0 ] && [ "$n_apply" -eq 0 ] && [ "$n_bad" -eq 0 ]; then exit 0; fi
exit 1
}
