#!/usr/bin/env bash
# CI: the racing sweeper as a user gets it. A fresh venv installs
# plugins/hydra_racing_sweeper alone (not editable): that must bring neither torch nor qknorm.
# Then, away from the repo (qknorm not importable): the noisy app of docs/your_app.md raced
# over seeds under hydra/sweeper=racing, the wheel and sdist, and the plugin's own tests.
#   PLUGIN_PYTEST_ARGS="-k discovery" bash .ci/plugin.sh   # other tests than Hydra's cases
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=$ROOT/.venv-plugin
unset PYTHONPATH  # the installed package, nothing of the checkout's
start=$SECONDS
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# The plugin's files as a clone has them (tracked and new, not ignored): pip and build write
# build/ and *.egg-info into the tree they install from, and a stale build/lib would ship.
PLUGIN=$WORK/plugins/hydra_racing_sweeper
git ls-files -z --cached --others --exclude-standard -- plugins/hydra_racing_sweeper \
    | tar --null --ignore-failed-read -T - -cf - | tar -xf - -C "$WORK"

rm -rf "$VENV"
python3 -m venv "$VENV"
pip=("$VENV/bin/pip" --quiet)
before=$("$VENV/bin/pip" list --format=freeze | wc -l)
t=$SECONDS
"${pip[@]}" install "$PLUGIN"
installed=$(( $("$VENV/bin/pip" list --format=freeze | wc -l) - before ))
echo "plugin: pip install ./plugins/hydra_racing_sweeper: $installed packages in $((SECONDS - t)) s"
for name in torch qknorm; do
    if "$VENV/bin/pip" list --format=freeze | grep -qi "^$name=="; then
        echo "plugin: error: pip install ./plugins/hydra_racing_sweeper installed $name;" \
            "the plugin must not depend on it (plugins/hydra_racing_sweeper/pyproject.toml)" >&2
        exit 1
    fi
done
# --no-compile: what the checks need, not what a user gets (the line above is that).
"${pip[@]}" install --no-compile pytest pytest-xdist build
cd "$WORK"
"$VENV/bin/python" -c 'import hydra_racing_sweeper as m, sys; "site-packages" in m.__file__ or sys.exit(f"plugin: error: hydra_racing_sweeper imported from {m.__file__}, not the venv")'
if "$VENV/bin/python" -c 'import qknorm' 2>/dev/null; then
    echo "plugin: error: qknorm is importable in the plugin's venv" >&2
    exit 1
fi

# docs/your_app.md's race over six seeds, its app unchanged, under the plugin's own name.
t=$SECONDS
mkdir "$WORK/noisy" && cd "$WORK/noisy"
"$VENV/bin/python" "$ROOT/examples/noisy_app/app.py" -m hydra/sweeper=racing steps=20 \
    'lr=choice(0.1,0.12,0.05,0.001)' hydra.sweeper.sampler.name=grid hydra.sweeper.n_trials=null \
    '+hydra.sweeper.replicates={seed:[0,1,2,3,4,5]}' \
    '++hydra.sweeper.race={min_replicates:3,equivalence:0.05,rungs:[10],margin:0.5}' \
    'hydra.sweeper.objectives=[loss]' hydra.sweeper.storage=sqlite:///optuna.db \
    hydra.sweeper.study_name=race "hydra.sweep.dir=$WORK/noisy/sweep" > noisy.log 2>&1 \
    || { tail -n 30 noisy.log; echo "plugin: error: the noisy app's race failed" >&2; exit 1; }
test -s sweep/optimization_results.yaml \
    || { tail -n 30 noisy.log; echo "plugin: error: the race wrote no optimization_results.yaml" >&2; exit 1; }
grep '^race:' noisy.log
echo "plugin: the noisy app's race in $((SECONDS - t)) s"

# The wheel and the sdist hold the two packages, hydra_plugins a namespace (no __init__.py:
# Hydra finds plugins only that way), and nothing of qknorm.
t=$SECONDS
"$VENV/bin/python" -m build --outdir "$WORK/dist" "$PLUGIN" > "$WORK/build.log" 2>&1 \
    || { tail -n 30 "$WORK/build.log"; echo "plugin: error: python -m build failed" >&2; exit 1; }
"$VENV/bin/python" - "$WORK"/dist/*.whl "$WORK"/dist/*.tar.gz <<'EOF'
import sys
import tarfile
import zipfile

for path in sys.argv[1:]:
    if path.endswith(".whl"):
        names = zipfile.ZipFile(path).namelist()
    else:  # the sdist: hydra_racing_sweeper-0.1.0/...
        names = [n.split("/", 1)[1] for n in tarfile.open(path).getnames() if "/" in n]
    wrong = [f"no {n}" for n in ("hydra_racing_sweeper/__init__.py",
                                 "hydra_plugins/hydra_racing_sweeper/__init__.py",
                                 "hydra_plugins/hydra_racing_sweeper/config.py")
             if n not in names]
    wrong += [f"has {n}" for n in names
              if n == "hydra_plugins/__init__.py" or any(p.startswith("qknorm") for p in n.split("/"))]
    if wrong:
        sys.exit(f"plugin: error: {path.rsplit('/', 1)[1]}: {'; '.join(wrong)}")
    print(f"plugin: {path.rsplit('/', 1)[1]}: {len(names)} files, both packages, no qknorm")
EOF
echo "plugin: built in $((SECONDS - t)) s"

# The plugin's tests, from its copy: pytest puts the tests' dir on sys.path (conftest.py),
# not the package's source; -c: the plugin's settings, not a pyproject.toml found upwards.
# Here, the cases of Hydra's own Optuna sweeper suite (its nine) and storage null under the
# basic launcher: what a user switching sweepers runs into. `make test` runs all of them in
# the dev venv already, so CI does not pay for the rest twice.
# Two workers, as make test: each test is a sweep in its own tmp dir, and CI has two cores.
HYDRA_CASES="sphere_example or grid_sampler or multi_objective_example or custom_search_space_example or failure_rate or storage_null_basic"
t=$SECONDS
cd "$PLUGIN"
# shellcheck disable=SC2086  # PLUGIN_PYTEST_ARGS: several words
"$VENV/bin/pytest" -c pyproject.toml -p no:cacheprovider -q -n 2 \
    ${PLUGIN_PYTEST_ARGS:--k "$HYDRA_CASES"} tests
echo "plugin: tests in $((SECONDS - t)) s"

# Beside Hydra's own plugin, as PyPI has it: hydra-optuna-sweeper 1.2.0 pins optuna<3, so
# --no-deps (its sweep runs on this venv's Optuna). Each sweeper sweeps with the other
# installed: ours on the sphere example (its sampler group entries are then Hydra's nodes),
# Hydra's on a config of its own (1.2.0's schema has no max_failure_rate, which ours sets).
t=$SECONDS
"${pip[@]}" install --no-deps hydra-optuna-sweeper==1.2.0
mkdir "$WORK/beside" && cd "$WORK/beside"
printf 'x: 1\ny: 1\n' > plain.yaml
"$VENV/bin/python" "$PLUGIN/example/sphere.py" --multirun "hydra.sweep.dir=$WORK/beside/racing" \
    > racing.log 2>&1 || { tail -n 30 racing.log; echo "plugin: error: hydra/sweeper=racing failed beside hydra-optuna-sweeper" >&2; exit 1; }
"$VENV/bin/python" "$PLUGIN/example/sphere.py" --config-dir "$WORK/beside" --config-name plain \
    --multirun hydra/sweeper=optuna 'x=interval(-5,5)' hydra.sweeper.n_trials=3 \
    "hydra.sweep.dir=$WORK/beside/optuna" > optuna.log 2>&1 \
    || { tail -n 30 optuna.log; echo "plugin: error: Hydra's hydra/sweeper=optuna failed beside ours" >&2; exit 1; }
for name in racing optuna; do
    grep -qx "name: $name" "$name/optimization_results.yaml" \
        || { echo "plugin: error: $name/optimization_results.yaml is not $name's" >&2; exit 1; }
done
echo "plugin: beside hydra-optuna-sweeper 1.2.0, each sweeper's sweep in $((SECONDS - t)) s"
echo "plugin: done in $((SECONDS - start)) s"
