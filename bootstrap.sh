#!/usr/bin/env bash
# Set up gpulab in a virtual environment and run it.
#
#   ./bootstrap.sh [provision] [ansible-playbook options]   ansible-playbook site.yml: provision and validate this
#                                                           machine (inventory/local.yml) or, with -i, a fleet
#   ./bootstrap.sh validate [pytest options]                validate this machine only; prints the report's path
#   ./bootstrap.sh test [pytest options]                    run gpulab's own tests
#
# GPULAB_VENV (default .venv) picks the environment; GPULAB_EXTRAS the extras installed (default: ansible for
# provision, torch for validate, torch,tf-cpu,vm,ansible,dev for test). Extras already installed stay installed.
set -euo pipefail
cd "$(dirname "$0")"

venv=${GPULAB_VENV:-.venv}
action=${1:-provision}
[ $# -gt 0 ] && shift

die() { echo "bootstrap: $*" >&2; exit 2; }

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
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
  else
    die "Python's venv module is missing: run 'sudo apt-get install python3-venv' and try again"
  fi
fi

case "$action" in
  provision) extras=${GPULAB_EXTRAS:-ansible} ;;
  validate) extras=${GPULAB_EXTRAS:-torch} ;;
  test) extras=${GPULAB_EXTRAS:-torch,tf-cpu,vm,ansible,dev} ;;
esac

# The tests' system packages (tests/system-packages.txt): libvirt, QEMU, debootstrap, and what builds libvirt-python.
if [ "$action" = test ]; then
  packages=$(grep -v '^#' tests/system-packages.txt | xargs)
  # shellcheck disable=SC2086
  absent=$(dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' $packages 2>/dev/null | awk '$1 != "ii" {print $2}' | xargs)
  for p in $packages; do dpkg-query -W "$p" >/dev/null 2>&1 || absent="$absent $p"; done
  absent=$(echo $absent | tr ' ' '\n' | sort -u | xargs)
  if [ -n "$absent" ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
      echo "bootstrap: installing the tests' system packages: $absent"
      # shellcheck disable=SC2086
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $absent >/dev/null
    else
      echo "bootstrap: the tests that need $absent will skip; install them with: sudo apt-get install $absent" >&2
    fi
  fi
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
  "$python" -m venv "$venv"
fi
if [ -n "$missing" ]; then
  extras=$(echo "${stamp_extras:-}$missing" | sed 's/^,//')
  echo "bootstrap: installing gpulab[$extras] into $venv (pinned by constraints.txt)"
  "$venv/bin/python" -m pip install -q -c constraints.txt --upgrade pip
  "$venv/bin/python" -m pip install -q -c constraints.txt -e ".[$extras]"
  echo "$pins $extras" > "$stamp_file"
else
  # The environment may come from another checkout: point gpulab at this one (no dependency changes).
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
  test) exec "$venv/bin/python" -m pytest tests/ "$@" ;;
esac
