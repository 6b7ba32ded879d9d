#!/usr/bin/env bash
# Set up a fresh Debian 12 machine (as root) for gpufleet, then run one of:
#   demo  - the main job on the local default: up, configure, validate, report, down (examples/local.yaml);
#           demo --slow-node adds the second act (examples/local-slow-node.yaml: a slowed node found and drained)
#   test  - every test, the end-to-end local cluster included
#   setup - only the set-up
# Idempotent: a second run reuses the packages, the virtualenv and the cached node image.
set -euo pipefail

action="${1:-setup}"
shift || true
case "$action" in demo|test|setup) ;; *) echo "usage: $0 demo|test|setup [args...]" >&2; exit 2 ;; esac

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

if [ "$(id -u)" -ne 0 ]; then
  echo "bootstrap: run as root (the local backend runs rootful podman): sudo bash $0 $action" >&2
  exit 8
fi

host_packages=(podman runc debootstrap uidmap netavark aardvark-dns iptables openssh-client ca-certificates)
if [ "$action" = test ]; then
  # The tests' stand-in vendor apt repositories (dpkg-scanpackages) and Ansible's apt module on the host;
  # promtool (Debian ships it in prometheus) for the monitoring rules' unit tests; systemd-fstab-generator;
  # mksquashfs (squashfs-tools) for the containers test's images.
  host_packages+=(dpkg-dev python3-apt prometheus systemd squashfs-tools)
fi
missing=()
for package in "${host_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ! command -v python3 >/dev/null || ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  missing+=(python3)
fi
if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  missing+=(python3-venv)
fi
if [ "${#missing[@]}" -gt 0 ]; then
  echo "bootstrap: installing host packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

venv="$here/.venv"
stamp="$venv/.gpufleet-installed"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "bootstrap: installing gpufleet and its dependencies into $venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q -e ".[dev]"
  touch "$stamp"
fi

case "$action" in
  setup) echo "bootstrap: ready. Try: $venv/bin/gpufleet --help" ;;
  demo)
    if [ "${1:-}" = "--slow-node" ]; then
      # Act one, then act two: one node's link slowed on purpose, found by the bisection and drained.
      shift
      "$venv/bin/gpufleet" run examples/local.yaml "$@"
      exec "$venv/bin/gpufleet" run examples/local-slow-node.yaml --slow-node "$@"
    fi
    exec "$venv/bin/gpufleet" run examples/local.yaml "$@" ;;
  # Two workers: one runs the Slurm cluster tests, the other the rest and then the GPU cluster tests
  # (tests/conftest.py). -n 0 (or -p no:xdist) in the arguments runs everything in one process.
  test) exec "$venv/bin/python" -m pytest -n 2 --dist loadgroup "$@" ;;
esac
