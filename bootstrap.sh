#!/usr/bin/env bash
# Set up gpulab in a virtual environment and run it.
#
#   ./bootstrap.sh [provision] [ansible-playbook options]   ansible-playbook site.yml: provision and validate this
#                                                           machine (inventory/local.yml) or, with -i, a fleet
#   ./bootstrap.sh validate [pytest options]                validate this machine only; prints the report's path
#   ./bootstrap.sh test [pytest options]                    run gpulab's own tests (CI runs them all)
#   ./bootstrap.sh test --fast [pytest options]             the fast lane: every test not marked slow (no Debian
#                                                           roots, guests, playbooks or trainings), minutes
#
# GPULAB_VENV (default .venv) picks the environment; GPULAB_EXTRAS the extras installed (default: ansible for
# provision, torch for validate, torch,tf-cpu,vm,ansible,dev for test). Extras already installed stay installed.
set -euo pipefail
cd "$(dirname "$0")"

venv=${GPULAB_VENV:-.venv}
action=${1:-provision}
[ $# -gt 0 ] && shift

die() { echo "bootstrap: $*" >&2; exit 2; }
# Anything that fails without its own message still names the command and the line, never exits silently.
trap 'rc=$?; echo "bootstrap: failed (exit $rc) at line $LINENO: $BASH_COMMAND" >&2' ERR

# step WHAT FIX COMMAND...: run COMMAND with its output kept in a log; on failure say what failed, how to fix it,
# and show the log's last lines.
step() {
  local what=$1 fix=$2 log rc=0
  shift 2
  log=$(mktemp "${TMPDIR:-/tmp}/gpulab-bootstrap.XXXXXX")
  "$@" >"$log" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "bootstrap: $what failed (exit $rc): $*" >&2
    tail -n 20 "$log" | sed 's/^/  | /' >&2
    echo "bootstrap: $fix (full output: $log)" >&2
    exit 2
  fi
  rm -f "$log"
}

# apt_install PACKAGE...: as root with apt-get, install; otherwise stop and say which command installs them.
apt_install() {
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    die "missing system packages: $*; install them with: sudo apt-get install $*"
  fi
  echo "bootstrap: installing system packages: $*"
  step "apt-get update" "check the machine's apt sources and network, then run again" apt-get update -qq
  step "apt-get install $*" "install them by hand (apt-get install $*) and run again" \
    env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

# absent_packages PACKAGE...: those dpkg does not list as installed ("ii"); a package dpkg never heard of is absent.
absent_packages() {
  local p status
  for p in "$@"; do
    status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null) || status=""
    [ "${status:0:2}" = ii ] || echo "$p"
  done
}

case "$action" in
  provision|validate|test) ;;
  -*) set -- "$action" "$@"; action=provision ;;  # ./bootstrap.sh -i inventory/lab.yml: options for site.yml
  *) die "unknown action '$action': use './bootstrap.sh [provision]', './bootstrap.sh validate' or './bootstrap.sh test'" ;;
esac

python=${PYTHON:-python3}
command -v "$python" >/dev/null || die "$python not found: install Python >= 3.10 (apt-get install python3)"
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
  || die "$("$python" -V 2>&1) is too old: gpulab needs Python >= 3.10"

# Debian and Ubuntu ship venv and ensurepip separately from python3.
if ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
  echo "bootstrap: Python's venv module is missing"
  apt_install python3-venv
  "$python" -c 'import ensurepip, venv' 2>/dev/null \
    || die "python3-venv is installed but $python still lacks venv/ensurepip: install the venv package of $("$python" -V 2>&1)"
fi

case "$action" in
  provision) extras=${GPULAB_EXTRAS:-ansible} ;;
  validate) extras=${GPULAB_EXTRAS:-torch} ;;
  test) extras=${GPULAB_EXTRAS:-torch,tf-cpu,vm,ansible,dev} ;;
esac

# The tests' system packages (tests/system-packages.txt): libvirt, QEMU, debootstrap, and what builds libvirt-python.
# As root they are installed; otherwise the command that installs them is printed and the run stops.
if [ "$action" = test ]; then
  command -v dpkg-query >/dev/null \
    || die "dpkg-query not found: gpulab's tests need a Debian or Ubuntu machine (tests/system-packages.txt)"
  # shellcheck disable=SC2046
  # Each line: a package, then what the tests use from it; the first word is the package.
  absent=$(absent_packages $(awk '!/^[[:space:]]*(#|$)/ {print $1}' tests/system-packages.txt) | xargs)
  [ -z "$absent" ] || apt_install $absent
  absent=$(absent_packages $absent | xargs)
  [ -z "$absent" ] || die "apt-get reported success but these packages are still not installed: $absent"
fi

# The stamp records what built the environment: a hash of the pins and the extras installed.
pins=$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)
stamp_file=$venv/.gpulab-installed
read -r stamp_pins stamp_extras 2>/dev/null < "$stamp_file" || true
[ "${stamp_pins:-}" = "$pins" ] || stamp_extras=""
missing=""
for e in ${extras//,/ }; do
  case ",${stamp_extras:-}," in *",$e,"*) ;; *) missing="$missing,$e" ;; esac
done
if [ ! -x "$venv/bin/python" ]; then
  step "creating the virtual environment $venv" "check that $venv is writable, or set GPULAB_VENV to another path" \
    "$python" -m venv "$venv"
fi
if [ -n "$missing" ]; then
  extras=$(echo "${stamp_extras:-}$missing" | sed 's/^,//')
  echo "bootstrap: installing gpulab[$extras] into $venv (pinned by constraints.txt)"
  fix="check that PyPI (or PIP_INDEX_URL) is reachable; if $venv is damaged, remove it and run again"
  step "upgrading pip in $venv" "$fix" "$venv/bin/python" -m pip install -q -c constraints.txt --upgrade pip
  step "installing gpulab[$extras]" "$fix" "$venv/bin/python" -m pip install -q -c constraints.txt -e ".[$extras]"
  echo "$pins $extras" > "$stamp_file"
else
  # The environment may come from another checkout: point gpulab at this one (no dependency changes).
  step "installing this checkout into $venv" "remove $venv and run again" \
    "$venv/bin/python" -m pip install -q --no-deps -e .
fi

case "$action" in
  provision)
    # The roles install packages: as a user other than root, Ansible asks for the sudo password (unless told how).
    if [ "$(id -u)" -ne 0 ] && [[ " $* " != *" -K "* && " $* " != *" --ask-become-pass "* ]]; then
      echo "bootstrap: not root: ansible-playbook will ask for your sudo password (-K)" >&2
      set -- -K "$@"
    fi
    bin=$(cd "$venv/bin" && pwd)
    PATH="$bin:$PATH" exec "$bin/ansible-playbook" site.yml "$@" ;;
  validate) exec "$venv/bin/python" -m pytest validate/ -p no:cacheprovider "$@" ;;
  # Two pytest-xdist workers by default (GPULAB_TEST_WORKERS; 0 runs in one process): the tests that share the booted
  # guest stay on one worker (tests/conftest.py), the rest spread over both.
  test)
    lane=()
    export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}  # tests/conftest.py says why
    if [ "${1:-}" = --fast ]; then shift; lane=(-m "not slow"); fi
    exec "$venv/bin/python" -m pytest tests/ -n "${GPULAB_TEST_WORKERS:-2}" --dist loadgroup "${lane[@]}" "$@" ;;
esac
