# Debian packages fetched and unpacked into a folder of the repository, never installed:
# no root, no dpkg database entry, no service started, nothing written outside TOOLS.
#
#   bash deploy/debian-tools.sh TOOLS [--relocate DIR] PACKAGE... -- NAME[=PROGRAM]...
#
# `apt-get download` fetches each PACKAGE into TOOLS/debs/, `dpkg -x` unpacks it into
# TOOLS/root/, and TOOLS/bin/NAME runs TOOLS/root/usr/bin/PROGRAM (PROGRAM defaults to
# NAME) with the unpacked libraries first on LD_LIBRARY_PATH.
#
# --relocate DIR: a program that reads its data from a folder compiled in (Debian's
# Alertmanager: its notification templates in /usr/share/prometheus/alertmanager) reads
# the unpacked TOOLS/root/DIR instead: DIR's bytes in the program become /proc/self/fd/9
# padded with slashes to the same length (the kernel reads "//" as "/"), and NAME opens
# TOOLS/root/DIR as fd 9 before it execs the program.
#
# The package lists are the system's (/var/lib/apt/lists) when they know every PACKAGE;
# otherwise (a fresh machine that never ran `apt-get update`) a private copy is fetched
# into TOOLS/apt/ with the system's sources. DEBIAN_TOOLS_PRIVATE_LISTS=1 always uses it.
set -euo pipefail

for tool in apt-get apt-cache dpkg; do
  command -v "$tool" >/dev/null || {
    echo "$tool not found: the monitoring tools and kcat come from Debian's packages" \
      "(apt-get download, dpkg -x into deploy/tools/), which need a Debian or Ubuntu system"
    exit 1
  }
done

tools=$1
shift
relocate=
if [ "${1:-}" = --relocate ]; then
  relocate=$2
  shift 2
fi
packages=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do packages+=("$1"); shift; done
[ $# -gt 0 ] && shift
[ ${#packages[@]} -gt 0 ] && [ $# -gt 0 ] || {
  echo "usage: debian-tools.sh TOOLS PACKAGE... -- NAME[=PROGRAM]..."
  exit 2
}

mkdir -p "$tools"
tools=$(cd "$tools" && pwd)
if command -v flock >/dev/null; then  # make -j: one fetch at a time shares the lists and root/
  exec 8>"$tools/.lock"
  flock 8
fi
apt=()
if [ "$(id -u)" -eq 0 ]; then
  # apt downloads as its _apt user when run as root; that user cannot write into TOOLS.
  apt+=(-o APT::Sandbox::User=root)
fi

knows_every_package() {
  local package
  for package in "${packages[@]}"; do
    apt-cache "$@" show --no-all-versions "$package" >/dev/null 2>&1 || return 1
  done
}

if [ "${DEBIAN_TOOLS_PRIVATE_LISTS:-0}" = 1 ] || ! knows_every_package "${apt[@]}"; then
  mkdir -p "$tools/apt/lists/partial" "$tools/apt/cache/archives/partial"
  apt+=(
    -o "Dir::State::Lists=$tools/apt/lists"
    -o "Dir::Cache=$tools/apt/cache"
    -o Debug::NoLocking=1
  )
  echo "package lists: fetching a private copy into $tools/apt/lists"
  apt-get -qq "${apt[@]}" update
  knows_every_package "${apt[@]}" || {
    echo "apt's sources name no ${packages[*]}: the tools come from Debian bookworm's packages"
    exit 1
  }
fi

mkdir -p "$tools/debs" "$tools/root" "$tools/bin"
for package in "${packages[@]}"; do
  rm -f "$tools/debs/${package}_"*.deb
done
(cd "$tools/debs" && apt-get -qq "${apt[@]}" download "${packages[@]}")
for package in "${packages[@]}"; do
  deb=$(ls "$tools/debs/${package}_"*.deb)
  dpkg -x "$deb" "$tools/root"
  echo "$package $(dpkg-deb -f "$deb" Version) unpacked into $tools/root"
done

# Each NAME is a small script that finds the unpacked tree next to itself (the repository
# may move) and execs the program: the tool's process is the one a test starts and signals.
libraries=$(
  for package in "${packages[@]}"; do dpkg-deb -c "$tools/debs/${package}_"*.deb; done \
    | awk '$6 ~ /\.so(\.|$)/ { sub(/\/[^\/]*$/, "", $6); sub(/^\./, "$root", $6); print $6 }' \
    | sort -u | paste -sd:
)
for spec in "$@"; do
  name=${spec%%=*}
  program=usr/bin/${spec#*=}
  [ -x "$tools/root/$program" ] || { echo "${packages[*]} has no $program"; exit 1; }
  reads_folder=
  if [ -n "$relocate" ] && python3 - "$tools/root/$program" "$relocate" <<'PYTHON'
import sys
path, folder = sys.argv[1], sys.argv[2].encode()
fd = b"/proc/self/fd/9"
assert len(folder) >= len(fd), folder
body = open(path, "rb").read()
open(path, "wb").write(body.replace(folder, fd.ljust(len(folder), b"/")))
sys.exit(0 if folder in body else 1)
PYTHON
  then
    reads_folder=$relocate
  fi
  {
    echo '#!/bin/sh'
    echo "# Debian's $program, unpacked by deploy/debian-tools.sh."
    echo 'root=$(cd "${0%/*}/../root" && pwd)'
    if [ -n "$reads_folder" ]; then
      echo "exec 9<\"\$root$reads_folder\"  # the program reads $reads_folder as fd 9"
    fi
    if [ -n "$libraries" ]; then
      echo "LD_LIBRARY_PATH=\"$libraries\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\""
      echo 'export LD_LIBRARY_PATH'
    fi
    echo "exec \"\$root/$program\" \"\$@\""
  } >"$tools/bin/$name"
  chmod +x "$tools/bin/$name"
  echo "  $tools/bin/$name"
done
