# The turn-audit CLI and services in one image (docker-compose.yml runs it).
FROM python:3.12-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY src ./src
COPY producers ./producers
COPY consumers ./consumers
COPY schemas ./schemas
RUN pip install --no-cache-dir . \
    && useradd --system --uid 10001 turnaudit \
    && mkdir -p /var/lib/turnaudit/logs && chown -R turnaudit /var/lib/turnaudit
USER turnaudit
WORKDIR /var/lib/turnaudit
ENTRYPOINT ["turnaudit"]
CMD ["--help"]
