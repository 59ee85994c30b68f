"""The services' settings, where the demo reads them: they live in the runtime
(``turnaudit.consumers.runtime.settings``), which builds every service on them."""

from __future__ import annotations

from turnaudit.consumers.runtime.settings import (
    LogSinkSettings,
    MetricsSettings,
    ServiceName,
    ServiceSettings,
)

__all__ = ["LogSinkSettings", "MetricsSettings", "ServiceName", "ServiceSettings"]
