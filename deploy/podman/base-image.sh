#!/usr/bin/env bash
# The base image the Dockerfiles name (debian:bookworm-slim; SUITE trixie: the schema
# registry's debian:trixie-slim, whose Java is 21), made locally when no registry can be
# reached: a minbase debootstrap of the suite with the slim images' dpkg path-excludes and
# Debian's apt sources, imported into podman under the upstream name (a host that can
# pull gets the upstream image instead).
#
#   deploy/podman/base-image.sh [SUITE]     (default bookworm)
set -euo pipefail
suite=${1:-bookworm}
image=docker.io/library/debian:$suite-slim
podman image exists "$image" && exit 0
if timeout 60 podman pull -q "$image" >/dev/null 2>&1; then exit 0; fi
command -v debootstrap >/dev/null || { echo "debootstrap not found: make podman installs it"; exit 1; }
rootfs=$(mktemp -d "${TMPDIR:-/tmp}/turnaudit-rootfs.XXXXXX")
trap 'rm -rf "$rootfs"' EXIT
debootstrap --variant=minbase "$suite" "$rootfs" http://deb.debian.org/debian >"$rootfs.log" 2>&1 \
  || { tail -n 20 "$rootfs.log"; rm -f "$rootfs.log"; exit 1; }
rm -f "$rootfs.log" "$rootfs/etc/apt/sources.list"
cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<SOURCES
Types: deb
URIs: http://deb.debian.org/debian
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
mkdir -p "$rootfs/etc/dpkg/dpkg.cfg.d"
cat >"$rootfs/etc/dpkg/dpkg.cfg.d/docker" <<'EXCLUDES'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
EXCLUDES
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/usr/share/man/* \
  "$rootfs"/usr/share/locale/*
tar -C "$rootfs" -c . | podman import -q - "$image" >/dev/null
echo "made $image locally (debootstrap)"
