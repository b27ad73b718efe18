#!/usr/bin/env bash
# Mutation testing with cargo-mutants over the parts whose tests must catch a broken line: the
# placement crate, the Host check, the engine, the claims, the loops' pure views and plans (the
# tenant status, the registration plan), the capacity tick, the cluster-api provisioner and the
# in-memory API's schema and rules. Each mutant is one small change to the code (a `>` made `>=`, a body replaced by a
# default); a mutant the tests still pass is "missed": a line no test guards.
#
# Usage:
#   bash ci/mutants.sh             the files changed since origin/main (or HEAD~1), in those parts
#   bash ci/mutants.sh BASE        the lines changed since the git ref BASE
#   bash ci/mutants.sh --all       every mutant of those parts (hours on 2 cores; on demand only)
#   bash ci/mutants.sh --iterate   only the mutants the last run missed (after sharper tests)
# Results: mutants.out/<package>[-capacity-decide|-capacity|-capi|-loops]/mutants.out/ (caught.txt, missed.txt, timeout.txt, unviable.txt);
# docs/testing.md says how the misses are judged. cargo-mutants builds in a copy of the tree (the
# first build there is cold). Not part of .ci/run: too slow for CI.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=27.1.0
if ! cargo mutants --version 2>/dev/null | grep -q "$VERSION"; then
    cargo install cargo-mutants --locked --version "$VERSION"
fi

# Each part: the package, the files, the tests that guard them, and the seconds a mutant's tests
# may take. The controller's pure parts run its unit tests (the decisions are table-tested
# there); the purchase loop's money paths (a refused or raced create, retire or hand-back) are
# guarded by the protocol suite's node-request tests too, about 15 s a mutant (a mutant that
# stops the loop waits out the timeout).
parts=(
    "placement|placement/src/*.rs|--lib --test *|300"
    "inmem-apiserver|inmem-apiserver/src/schema.rs inmem-apiserver/src/rules.rs|--lib --test *|300"
    "host-check|host-check/src/*.rs|--lib|60"
    "tenant-placer|src/controller/engine/batch.rs src/controller/engine/conflicts.rs src/controller/engine/bought.rs src/controller/state/claims.rs|--lib|300"
    "tenant-placer|src/controller/capacity/decide.rs src/controller/capacity/accounts.rs src/controller/capacity/view.rs|--lib -- controller::capacity|120"
    "tenant-placer|src/controller/tenant/status.rs src/controller/register/plan.rs|--lib -- controller::tenant controller::register|120"
    "tenant-placer|src/controller/capacity/write.rs src/controller/capacity/memory.rs src/controller/capacity/snapshot.rs src/controller/capacity/mod.rs|--lib --test protocol -- controller::capacity requests:: money::|90"
    "tenant-placer|src/controller/capi/*.rs src/api/capi.rs src/api/allocatable.rs|--lib --test protocol -- capi allocatable|90"
)

mode=diff
base=""
case "${1:-}" in
    --all) mode=all ;;
    --iterate) mode=iterate ;;
    "") base=$(git rev-parse --verify -q origin/main || git rev-parse HEAD~1) ;;
    *) base=$1 ;;
esac
diff_file=""
if [ "$mode" = diff ]; then
    diff_file=$(mktemp)
    trap 'rm -f "$diff_file"' EXIT
    git diff "$base" -- '*.rs' >"$diff_file"
fi

mkdir -p mutants.out
for part in "${parts[@]}"; do
    IFS='|' read -r package files tests timeout <<<"$part"
    out="mutants.out/$package"
    case "$files" in
        *capacity/decide.rs*) out="$out-capacity-decide" ;;
        *capacity/write.rs*) out="$out-capacity" ;;
        *capi*) out="$out-capi" ;;
        *tenant/status.rs*) out="$out-loops" ;;
    esac
    args=(-p "$package" --timeout "$timeout" --profile mutants --output "$out")
    for file in $files; do
        args+=(-f "$file")
    done
    args+=(-e 'placement/src/testing.rs')
    case "$mode" in
        diff) args+=(--in-diff "$diff_file") ;;
        iterate) args+=(--iterate) ;;
    esac
    echo "== cargo mutants ${args[*]} -- $tests"
    # A missed mutant exits 2: report every part, then fail. The test arguments are words, not
    # file patterns (`--test *` names every integration test).
    set -f
    # shellcheck disable=SC2086
    cargo mutants "${args[@]}" -- $tests || status=$?
    set +f
done
exit "${status:-0}"
