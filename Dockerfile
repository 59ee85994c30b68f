# The turnaudit image: the CLI and every service, from the wheel `make dist` builds.
# `make image` builds it (it first gathers the wheel and its dependencies into
# dist/wheelhouse/, so the build needs no package index and no Rust toolchain).
#
# Stage 1 installs the wheelhouse into a venv; stage 2 is Debian's python3 with that
# venv, run as a non-root user. No compiler is in either.
ARG BASE=debian:bookworm-slim

FROM ${BASE} AS install
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*
COPY dist/wheelhouse/ /tmp/wheelhouse/
RUN python3 -m venv /opt/turnaudit \
    && /opt/turnaudit/bin/pip install --no-cache-dir --no-index --find-links /tmp/wheelhouse turnaudit \
    && /opt/turnaudit/bin/pip uninstall -y pip

FROM ${BASE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /var/lib/turnaudit turnaudit \
    && mkdir -p /var/lib/turnaudit/logs /var/lib/turnaudit/spool /var/lib/turnaudit/keys \
    && chown -R turnaudit /var/lib/turnaudit
COPY --from=install /opt/turnaudit /opt/turnaudit
ENV PATH=/opt/turnaudit/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1
USER 10001
WORKDIR /var/lib/turnaudit
ENTRYPOINT ["turnaudit"]
CMD ["--help"]
