#!/bin/bash
# Build Slurm from its release tarball into one .deb, on the node the slurm role chose for this build
# (tasks/build.yml; docs/slurm.md says why one package and not SchedMD's debian/ folder).
#
#   build-slurm-deb.sh TARBALL OUT_DIR PACKAGE DEB_VERSION -- CONFIGURE_OPTION...
#
# Environment (set by the role): SLURM_REQUIRED_PLUGINS (plugin files the build must produce, space
# separated), SLURM_CONFLICTS (packages the .deb conflicts with and replaces, comma separated), SLURM_JOBS
# (make -j; empty: every core), SLURM_USER_ID (the slurm user's uid and gid). "@MULTIARCH@" in an option becomes this node's multiarch triplet.
#
# Writes OUT_DIR/PACKAGE_DEB_VERSION_ARCH.deb and OUT_DIR/build.json (the times of each step and the CPU
# seconds the build used). Needs the build packages (the role installs them) and nothing from the network.
set -euo pipefail

tarball=$1 out=$2 package=$3 deb_version=$4
shift 4
[ "${1:-}" = "--" ] && shift

multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
arch=$(dpkg --print-architecture)
jobs=${SLURM_JOBS:-}
[ -n "$jobs" ] || jobs=$(nproc)
options=()
for option in "$@"; do
  options+=("${option//@MULTIARCH@/$multiarch}")
done

work=$(mktemp -d /var/tmp/gpufleet-slurm-build.XXXXXX)
trap 'rm -rf "$work"' EXIT
src=$work/src stage=$work/stage
mkdir -p "$src" "$stage" "$out"

now() { date +%s.%N; }
t0=$(now)
tar -xzf "$tarball" -C "$src" --strip-components=1
cd "$src"
# -O2 without -g: no debug sections to compile and strip (dpkg-buildflags would add -g; this package has no
# -dbgsym companion).
CFLAGS="-O2" ./configure --quiet "${options[@]}" >"$work/configure.log" 2>&1 || {
  tail -40 "$work/configure.log" >&2
  exit 1
}
t1=$(now)
# Only what runs on a node: the daemons, commands and plugins (src), and the systemd units (etc). The
# top-level make would also convert the HTML documentation and walk the test suite.
make -j"$jobs" --quiet -C src >"$work/make.log" 2>&1 || { tail -60 "$work/make.log" >&2; exit 1; }
make --quiet -C etc >>"$work/make.log" 2>&1 || { tail -20 "$work/make.log" >&2; exit 1; }
t2=$(now)
{
  make --quiet -C src install DESTDIR="$stage"
  make --quiet -C etc install DESTDIR="$stage"
  make --quiet install-pkgincludeHEADERS DESTDIR="$stage"  # slurm/*.h, spank.h among them (pyxis)
  make --quiet -C doc/man install DESTDIR="$stage"
} >"$work/install.log" 2>&1 || { tail -40 "$work/install.log" >&2; exit 1; }
# libtool archives, static libraries and the debugger's copy of srun's source: not for nodes.
find "$stage" \( -name '*.la' -o -name '*.a' \) -delete
rm -rf "$stage/usr/lib/$multiarch/slurm/src"
mkdir -p "$stage/etc/slurm"

missing=()
for plugin in ${SLURM_REQUIRED_PLUGINS:-}; do
  [ -e "$stage/usr/lib/$multiarch/slurm/$plugin" ] || missing+=("$plugin")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "the build has no ${missing[*]} (a build package missing at configure time? cgroup_v2.so needs" \
    "libdbus-1-dev and linux/bpf.h, mpi_pmix.so libpmix-dev): $(grep -E 'WARNING' "$work/configure.log" | head -5)" >&2
  exit 1
fi
t3=$(now)

# Runtime dependencies: the shared libraries the binaries link (dpkg-shlibdeps, as debhelper does), plus the
# package of the PMIx library mpi/pmix opens at run time (dlopen "libpmix.so.2", not linked: shlibdeps does
# not see it; libpmix2 on Debian 12 and Ubuntu 22.04, libpmix2t64 on Ubuntu 24.04), munge (auth/munge talks
# to munged) and dbus (cgroup/v2 asks systemd, over the system bus, for slurmstepd's scope).
mkdir -p "$work/shlibs/debian"
printf 'Source: %s\n\nPackage: %s\nArchitecture: any\n' "$package" "$package" >"$work/shlibs/debian/control"
mapfile -t elves < <(find "$stage" -type f \( -name '*.so*' -o -path '*/bin/*' -o -path '*/sbin/*' \) \
  -exec sh -c 'head -c4 "$1" | grep -q ELF && echo "$1"' _ {} \;)
if ! (cd "$work/shlibs" && dpkg-shlibdeps -O -l"$stage/usr/lib/$multiarch" -l"$stage/usr/lib/$multiarch/slurm" \
  "${elves[@]}") >"$work/shlibdeps.out" 2>"$work/shlibdeps.log"; then
  echo "dpkg-shlibdeps could not read the built binaries' libraries:" >&2
  tail -n 30 "$work/shlibdeps.log" >&2
  exit 1
fi
shlibs=$(sed -n 's/^shlibs:Depends=//p' "$work/shlibdeps.out")
pmix_lib=$(readlink -f "/usr/lib/$multiarch/pmix2/lib/libpmix.so")
pmix_package=$(dpkg-query -S "$pmix_lib" | cut -d: -f1)
pmix_version=$(dpkg-query -W -f='${Version}' "$pmix_package" | sed 's/-[^-]*$//')
depends="$shlibs, $pmix_package (>= $pmix_version), munge, dbus"

installed_size=$(du -sk "$stage" | cut -f1)
mkdir -p "$stage/DEBIAN"
cat >"$stage/DEBIAN/control" <<EOF
Package: $package
Version: $deb_version
Architecture: $arch
Maintainer: gpufleet <gpufleet@localhost>
Installed-Size: $installed_size
Depends: $depends
Conflicts: ${SLURM_CONFLICTS:?}
Replaces: $SLURM_CONFLICTS
Section: admin
Priority: optional
Homepage: https://slurm.schedmd.com
Description: Slurm workload manager, built by gpufleet from SchedMD's release
 Daemons (slurmctld, slurmd, slurmstepd), commands, plugins, headers and systemd units of one Slurm
 release, configured by gpufleet's slurm role. Built from $(basename "$tarball").
EOF
# libslurm.so lands in the multiarch folder: refresh the linker cache, as Debian's library packages do.
echo "activate-noawait ldconfig" >"$stage/DEBIAN/triggers"
# The user slurmctld runs as (SchedMD's slurmctld.service: User=slurm), with the same id on every node, as
# Debian's slurm-wlm-basic-plugins preinst makes it (adduser --system --group --uid 64030).
uid=${SLURM_USER_ID:?}
cat >"$stage/DEBIAN/preinst" <<EOF
#!/bin/sh
set -e
if [ "\$1" = install ] || [ "\$1" = upgrade ]; then
  getent group slurm >/dev/null || groupadd --system --gid $uid slurm
  getent passwd slurm >/dev/null || useradd --system --uid $uid --gid slurm --home-dir /nonexistent \\
    --no-create-home --shell /usr/sbin/nologin slurm
fi
EOF
chmod 0755 "$stage/DEBIAN/preinst"
deb="$out/${package}_${deb_version}_${arch}.deb"
dpkg-deb --root-owner-group -Zgzip --build "$stage" "$deb" >/dev/null
t4=$(now)

# CPU seconds of every process this script waited for (configure, make, the compilers): bash's `times`.
# (Into a file: in a $(...) subshell `times` would count the subshell's children, none.)
times >"$work/times"
cpu=$(tail -1 "$work/times" | awk '{ n = 0; for (i = 1; i <= 2; i++) { split($i, p, /[ms]/); n += p[1] * 60 + p[2] } printf "%.0f", n }')
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
cat >"$out/build.json" <<EOF
{
  "package": "$(basename "$deb")",
  "sha256": "$(sha256sum "$deb" | cut -d' ' -f1)",
  "bytes": $(stat -c %s "$deb"),
  "depends": "$depends",
  "jobs": $jobs,
  "configure_s": $(elapsed "$t0" "$t1"),
  "make_s": $(elapsed "$t1" "$t2"),
  "install_s": $(elapsed "$t2" "$t3"),
  "package_s": $(elapsed "$t3" "$t4"),
  "wall_s": $(elapsed "$t0" "$t4"),
  "cpu_s": $cpu
}
EOF
