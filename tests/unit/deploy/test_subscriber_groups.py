"""docs/subscribers.md names the project's consumer groups as the code makes them."""

from __future__ import annotations

import re

import yaml

from tests.support import PROJECT_ROOT
from turnaudit.consumers.settings import ServiceName, ServiceSettings, default_group_id
from turnaudit.kafka.acls import SERVICE_GROUPS, subscriber_groups
from turnaudit.kafka.groups import namespace, replay_group_id
from turnaudit.settings import DEFAULT_TOPIC_PREFIX

GUIDE = (PROJECT_ROOT / "docs/subscribers.md").read_text()
SECTION = GUIDE.split("## Consumer groups", 1)[1].split("\n## ", 1)[0]


def test_the_guide_lists_every_service_group_by_its_default() -> None:
    listed = re.findall(r"^\s*\| `<prefix>([\w-]+)` \(`([^`]+)`\)", SECTION, re.M)
    assert {name for name, _ in listed} == {service.value for service in ServiceName}
    assert {name for name, _ in listed} == set(SERVICE_GROUPS)  # the plan grants these
    for name, example in listed:
        service = ServiceName(name)
        assert example == default_group_id(DEFAULT_TOPIC_PREFIX, service)
        settings = ServiceSettings.from_env(service, {})
        assert settings.group_id == example  # the default when TURNAUDIT_GROUP_ID is unset


def test_the_guide_names_the_subscriber_replay_and_reader_groups() -> None:
    assert subscriber_groups("<prefix>", "<team>") + "<purpose>" in SECTION
    assert f"`{replay_group_id('<prefix>', 'NAME')}`" in SECTION
    assert f"`{namespace('<prefix>', '<user>')}`" in SECTION
    for purpose in ("reader-", "offsets-", "replay-reader-", "auditor-run-"):
        assert purpose in SECTION
    assert "turnaudit-reader-" not in GUIDE  # no group anything uses any more
    assert "turnaudit-replay." not in GUIDE


def test_compose_runs_the_services_in_their_default_groups() -> None:
    compose = yaml.safe_load((PROJECT_ROOT / "docker-compose.yml").read_text())
    prefix = compose["x-turnaudit-env"]["TURNAUDIT_TOPIC_PREFIX"]
    for name, service in compose["services"].items():
        assert "TURNAUDIT_GROUP_ID" not in service.get("environment", {}), name
        command = service.get("command", [])
        if "--group-id" in command:
            group = command[command.index("--group-id") + 1]
            assert group == default_group_id(prefix, ServiceName.AUDITOR_WORKER), name
    secure = (PROJECT_ROOT / "docker-compose.secure.yml").read_text()  # an override: no groups
    assert "GROUP_ID" not in secure
    assert "--group-id" not in secure
