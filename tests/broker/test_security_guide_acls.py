"""docs/security.md's ACL commands, as written, on the secured cluster: `acls plan` prints
the plan (a table, or one JSON object per ACL), and `acls apply`, run as the admin, creates
exactly the plan's ACLs and can run again."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from tests.support import PROJECT_ROOT
from tests.support.cli import run_turnaudit
from tests.support.clusters import SecuredCluster, admin_settings, principal_env
from turnaudit.kafka.acls import plan_acls, subscriber_principal
from turnaudit.kafka.admin import new_admin

pytestmark = pytest.mark.broker

PREFIX = "guide-acls."
GUIDE = PROJECT_ROOT / "docs" / "security.md"


def guide_commands() -> list[list[str]]:
    match = re.search(
        # The block whose marker names this file (docs/development.md, "Command blocks").
        r"<!-- runs-in: tests/broker/test_security_guide_acls\.py::[^>]*-->\n```sh\n(.*?)```",
        GUIDE.read_text(),
        re.DOTALL,
    )
    assert match is not None, "docs/security.md lost its ACL commands"
    return [shlex.split(line, comments=True) for line in match.group(1).splitlines()]


def test_the_guides_acls_plan_and_apply_create_exactly_the_plan_as_the_admin(
    secured: SecuredCluster, tmp_path: Path
) -> None:
    table, as_json, apply = guide_commands()
    assert table == ["turnaudit", "acls", "plan"]
    assert as_json[:3] == ["turnaudit", "acls", "plan"]
    assert apply[:3] == ["turnaudit", "acls", "apply"]
    team = apply[apply.index("--subscriber") + 1]
    env = principal_env(secured.broker, "admin", PREFIX)

    planned = plan_acls(PREFIX)
    shown = run_turnaudit(*table[1:], env=env, cwd=tmp_path, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[-1].startswith(f"{len(planned)} ACLs;")

    other = as_json[as_json.index("--prefix") + 1]
    printed = run_turnaudit(*as_json[1:], env=env, cwd=tmp_path, timeout=60)
    assert printed.returncode == 0, printed.stderr
    rules = [json.loads(line) for line in printed.stdout.splitlines()]
    assert len(rules) == len(plan_acls(other, subscribers=[team]))
    assert all(rule["name"].startswith(other) for rule in rules)
    assert f"User:{subscriber_principal(team)}" in {rule["principal"] for rule in rules}

    with_team = plan_acls(PREFIX, subscribers=[team])
    for _ in range(2):  # creating an ACL that exists changes nothing
        applied = run_turnaudit(*apply[1:], env=env, cwd=tmp_path, timeout=120)
        assert applied.returncode == 0, applied.stderr
        assert applied.stdout.startswith(f"acls: {len(with_team)} applied")

    admin = new_admin(admin_settings(secured.broker, PREFIX).client_config({"log_level": 0}))
    principal = f"User:{subscriber_principal(team)}"
    everything = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        principal,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    on_cluster = {
        (acl.restype.name.lower(), acl.name, acl.resource_pattern_type.name, acl.operation.name)
        for acl in admin.describe_acls(everything, request_timeout=30).result(timeout=30)
        if acl.name.startswith(PREFIX)  # the session's cluster holds other modules' plans
    }
    assert on_cluster  # the team's read grants at least
    assert all(rule.name.startswith(PREFIX) for rule in with_team)
    assert on_cluster == {
        (
            rule.resource,
            rule.name,
            "PREFIXED" if rule.prefixed else "LITERAL",
            rule.operation.upper(),
        )
        for rule in with_team
        if f"User:{rule.principal}" == principal
    }
