"""The pinned auditor's command-line options, and the auditor they build: shared by
``turnaudit eval evidence``, ``eval rebuild`` and ``turnaudit auditor run``."""

from __future__ import annotations

import argparse
from pathlib import Path

from turnaudit.errors import ConfigurationError
from turnaudit.evaluation.auditors import (
    PrefixAuditor,
    RuleBasedAuditor,
    RuleConfig,
    TwoTierAuditor,
)
from turnaudit.evaluation.files import read_json
from turnaudit.evaluation.model_auditor import OllamaAuditor

DEFAULT_OLLAMA_URL = "http://127.0.0.1:11434"


def add_auditor_arguments(parser: argparse.ArgumentParser, *, default: str) -> None:
    """The pinned auditor's options, shared with ``turnaudit auditor run``."""
    parser.add_argument(
        "--auditor",
        choices=("two-tier", "ollama", "rules"),
        default=default,
        help="auditor under test: two-tier (the production auditor: the rules "
        "first, escalating what they cannot settle to the pinned model), "
        f"or one tier alone (default: {default})",
    )
    parser.add_argument("--model", help="exact Ollama tag, e.g. qwen3.5:2b")
    parser.add_argument("--expected-digest", help="the tag's pinned SHA-256 (sha256: optional)")
    parser.add_argument(
        "--ollama-url",
        default=DEFAULT_OLLAMA_URL,
        help=f"Ollama base URL (default {DEFAULT_OLLAMA_URL})",
    )
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="seconds per Ollama request (default 120)"
    )
    parser.add_argument(
        "--auditor-config",
        type=Path,
        help="JSON object of rule-auditor settings (rules and two-tier)",
    )


def build_auditor(args: argparse.Namespace) -> PrefixAuditor:
    if args.auditor == "rules":
        if args.model or args.expected_digest:
            raise ConfigurationError(
                "--model/--expected-digest apply to --auditor two-tier or ollama only"
            )
        return _rules(args)
    if args.auditor_config and args.auditor != "two-tier":
        raise ConfigurationError("--auditor-config applies to --auditor rules or two-tier only")
    if not args.model or not args.expected_digest:
        raise ConfigurationError(
            f"--auditor {args.auditor} needs --model TAG and --expected-digest HEX"
        )
    model = OllamaAuditor(args.ollama_url, args.model, args.expected_digest, timeout=args.timeout)
    return TwoTierAuditor(_rules(args), model) if args.auditor == "two-tier" else model


def _rules(args: argparse.Namespace) -> RuleBasedAuditor:
    settings = read_json(args.auditor_config) if args.auditor_config else {}
    if not isinstance(settings, dict):
        raise ConfigurationError(f"{args.auditor_config} must hold a JSON object")
    return RuleBasedAuditor(RuleConfig.from_mapping(settings))
