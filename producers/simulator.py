"""A deterministic turn-runtime simulator: realistic TurnEvents and their ground truth.

For a seed it yields the same turns: many sessions over packs and domains,
main and stub turns (cold start, unknown domain), refusals, hedges (some on an
already hedged surface, which is not an injection), action assessments on every
path of the verdict split and every risk tier, and task runs in four families
that are healthy or go wrong at a known step; each turn under a span of the
runtime's (v4's trace context) and each main turn naming its model. It builds every event through
the real ``TurnEventBuilder``, and counts what it built into ``GroundTruth``,
which the demo and the tests reconcile against what consumers saw.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from turnaudit.events import OutgoingTurnEvent
from turnaudit.producers.adapter import (
    Model,
    RuntimeInfo,
    TaskStep,
    ToolCall,
    Trace,
    TurnContext,
    TurnEventBuilder,
    inject_hedge,
)
from turnaudit.verdicts import (
    ActionAssessment,
    EthicsVerdict,
    IdentityScore,
    RiskTier,
    SafetyVerdict,
    Verdict,
)

TASK_FAMILIES = ("code-fix", "code-gen", "data-analysis", "web-research")
# The models a simulated main turn names (v4's gen_ai.provider.name, gen_ai.request.model).
MODELS = (
    Model("openai", "gpt-4o-mini", "gpt-4o-mini-2024-07-18"),
    Model("ollama", "llama3.2:1b"),
    Model("anthropic", "claude-3-5-haiku", "claude-3-5-haiku-20241022"),
)
PACKS: dict[str, tuple[str, ...]] = {
    "general": ("smalltalk", "howto", "travel"),
    "medical": ("triage", "medication", "nutrition"),
    "finance": ("tax", "investing", "budgeting"),
    "devops": ("ci", "infrastructure", "incident"),
    "legal": ("contracts", "privacy"),
}
HEDGE = "I may be wrong, but"
REFUSAL_PREFIX = "[refusal]"
BOUNDARIES = ("self-harm", "weapons", "medical-dosage", "credentials", "pii-exfiltration")
PREDICATES = ("honesty", "autonomy", "non-maleficence", "fairness", "privacy")
TOOLS = ("run_tests", "read_file", "apply_patch", "http_get", "sql_query", "search")
# What each family's failing runs do at their oracle step.
FAILURE_MODES = {
    "code-fix": "action_void",
    "code-gen": "identity_collapse",
    "data-analysis": "refusal",
    "web-research": "tool_failures",
}
IDENTITY_THRESHOLD = 0.5


@dataclass(frozen=True, slots=True)
class SimulatedTask:
    task_id: str
    task_family: str
    session_id: str
    steps: int
    # The task turn (0-based) where intervention is first justified; None: healthy.
    # HTIR traces also hold tool steps: the trace's step index of that turn is
    # HtirTrace.turn_index(oracle_alarm_turn).
    oracle_alarm_turn: int | None
    failure_mode: str | None

    def as_json(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "task_family": self.task_family,
            "session_id": self.session_id,
            "steps": self.steps,
            "oracle_alarm_turn": self.oracle_alarm_turn,
            "failure_mode": self.failure_mode,
            "oracle_source": "turnaudit-simulator/1 (scripted failure step)",
        }


@dataclass
class GroundTruth:
    """What the simulator built, counted the way the consumers count it."""

    seed: int
    events: int = 0
    by_path: Counter[str] = field(default_factory=Counter)
    by_schema_version: Counter[int] = field(default_factory=Counter)
    by_pack: Counter[str] = field(default_factory=Counter)
    refused_by_pack: Counter[str] = field(default_factory=Counter)
    hedged_by_pack: Counter[str] = field(default_factory=Counter)
    by_output_policy: Counter[str] = field(default_factory=Counter)
    by_risk_tier: Counter[str] = field(default_factory=Counter)
    sessions: set[str] = field(default_factory=set)
    # Sessions written with v3 or later: the ordered streams (session, producer) that
    # verify chains and judges against signed checkpoints (v1/v2 carry no turn identity).
    chained_sessions: set[str] = field(default_factory=set)
    traced: int = 0  # turns carrying a trace context (v4)
    with_model: int = 0  # turns naming their model (v4 main turns)
    tasks: list[SimulatedTask] = field(default_factory=list)

    @property
    def refused(self) -> int:
        return sum(self.refused_by_pack.values())

    @property
    def hedged(self) -> int:
        return sum(self.hedged_by_pack.values())

    def count(self, event: OutgoingTurnEvent) -> None:
        pack = event["pack_id"]
        bundle = event["verdicts"]
        self.events += 1
        self.by_path[event["path"]] += 1
        self.by_schema_version[bundle["schema_version"]] += 1
        self.by_pack[pack] += 1
        self.refused_by_pack[pack] += bundle["refusal_emitted"]
        self.hedged_by_pack[pack] += bundle["hedge_injected"]
        self.sessions.add(event["session_id"])
        if bundle["schema_version"] >= 3:
            self.chained_sessions.add(event["session_id"])
        self.traced += event.get("trace_context") is not None
        self.with_model += event.get("model") is not None
        action = event["action_assessment"]
        if action is not None:
            self.by_output_policy[action["output_policy"]] += 1
            self.by_risk_tier[action["risk_tier"]] += 1

    def as_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "events": self.events,
            "sessions": len(self.sessions),
            "by_path": dict(self.by_path),
            "by_schema_version": {str(k): v for k, v in self.by_schema_version.items()},
            "by_pack": dict(self.by_pack),
            "refused_by_pack": dict(self.refused_by_pack),
            "hedged_by_pack": dict(self.hedged_by_pack),
            "by_output_policy": dict(self.by_output_policy),
            "by_risk_tier": dict(self.by_risk_tier),
            "tasks": [t.as_json() for t in self.tasks],
        }


@dataclass
class _Session:
    session_id: str
    pack_id: str
    domain: str
    builder: TurnEventBuilder
    turn: int = 0
    task: SimulatedTask | None = None
    task_step: int = 0
    identity: float = 0.85


# The simulated clock advances 5..MAX_TURN_GAP_MS between turns.
MAX_TURN_GAP_MS = 400


def default_start(now: datetime | None = None) -> datetime:
    """The simulated clock's default start: tomorrow, 00:00 UTC (the same turns for a
    seed all day). Ahead of the wall clock on purpose: the publisher stamps a record
    with its turn's occurred_at capped at now, so simulated turns are stored at the
    moment they are published (broker-time ranges and time retention see them as
    new), while their occurred_at stays the seed's clock, never the wall clock. A
    fixed past date would put them out of a topic's time retention once it is
    older than that: deleted at the broker's next check."""
    today = (now or datetime.now(UTC)).replace(hour=0, minute=0, second=0, microsecond=0)
    return today + timedelta(days=1)


class TurnRuntimeSimulator:
    """Yields TurnEvents (unsent: no event id or sequence yet) for a seed; the
    simulated clock starts at ``start`` (default: ``default_start()``)."""

    def __init__(
        self,
        seed: int,
        *,
        # Each new session draws its writer version from these; a version given n
        # times is drawn n times as often (the demo's mostly-v4 mix: 4,4,4,4,4,4,3,2,1).
        schema_versions: Sequence[int] = (2,),
        concurrent_sessions: int = 50,
        task_share: float = 0.35,
        failing_task_share: float = 0.5,
        silent_failure_share: float = 0.08,
        start: datetime | None = None,
        runtime: RuntimeInfo | None = None,
    ) -> None:
        self.seed = seed
        self._rng = random.Random(seed)
        runtime = runtime or RuntimeInfo("turnaudit-simulator", "1.0", f"sim-{seed}")
        self._builders = {v: TurnEventBuilder(runtime, v) for v in schema_versions}
        self._versions = tuple(schema_versions)
        self._concurrent = concurrent_sessions
        self._task_share = task_share
        self._failing_share = failing_task_share
        self._silent_share = silent_failure_share
        self._clock = start or default_start()
        self._session_counter = 0
        self._task_counter = 0
        self.truth = GroundTruth(seed)

    def events(self, count: int) -> Iterator[OutgoingTurnEvent]:
        sessions = [self._new_session() for _ in range(self._concurrent)]
        produced = 0
        while produced < count:
            index = self._rng.randrange(len(sessions))
            session = sessions[index]
            event = self._turn(session)
            if event is None:  # a correct() fallback: the runtime emits nothing
                continue
            self.truth.count(event)
            produced += 1
            yield event
            if session.task is None and session.turn >= self._rng.randint(4, 30):
                sessions[index] = self._new_session()

    # -- sessions and tasks --------------------------------------------------
    def _new_session(self) -> _Session:
        self._session_counter += 1
        pack = self._rng.choice(sorted(PACKS))
        version = self._rng.choice(self._versions)
        session = _Session(
            session_id=f"s{self.seed}-{self._session_counter:06d}",
            pack_id=pack,
            domain=self._rng.choice(PACKS[pack]),
            builder=self._builders[version],
            identity=self._rng.uniform(0.75, 0.95),
        )
        if self._rng.random() < self._task_share:
            # Agent runtimes that run tasks report tool steps, which v2 and later carry.
            session.builder = self._builders[max(self._versions)]
            self._start_task(session)
        return session

    def _start_task(self, session: _Session) -> None:
        self._task_counter += 1
        family = TASK_FAMILIES[self._task_counter % len(TASK_FAMILIES)]
        steps = self._rng.randint(5, 10)
        failing = self._rng.random() < self._failing_share
        task = SimulatedTask(
            task_id=f"task-{self.seed}-{self._task_counter:05d}",
            task_family=family,
            session_id=session.session_id,
            steps=steps,
            oracle_alarm_turn=self._rng.randint(1, steps - 2) if failing else None,
            failure_mode=(
                # Some runs go wrong with nothing the runtime's verdicts show (a
                # plausible but wrong answer): an auditor reading verdicts misses them.
                ("silent" if self._rng.random() < self._silent_share else FAILURE_MODES[family])
                if failing
                else None
            ),
        )
        session.task, session.task_step = task, 0

    # -- one turn --------------------------------------------------------------
    def _turn(self, session: _Session) -> OutgoingTurnEvent | None:
        rng = self._rng
        self._clock += timedelta(milliseconds=rng.randint(5, MAX_TURN_GAP_MS))
        session.turn += 1
        task = session.task
        step = None
        if task is not None:
            step = TaskStep(
                task.task_id,
                task.task_family,
                session.task_step,
                end_of_task=session.task_step == task.steps - 1,
            )
        span = self._span(session)
        ctx = TurnContext(
            session.session_id,
            session.pack_id,
            session.domain,
            session.turn - 1,
            self._clock,
            step,
            trace=span,
        )
        tokens = [f"tok{rng.randrange(5000)}" for _ in range(rng.randint(1, 24))]
        if task is None and ((session.turn == 1 and rng.random() < 0.08) or rng.random() < 0.03):
            return self._stub_turn(session, ctx, tokens)
        if task is None and rng.random() < 0.005:
            # The correct() fallback calls the stub path without tokens.
            return session.builder.stub_turn(
                ctx,
                input_tokens=None,
                versor_condition=1.0,
                safety_verdict=None,
                ethics_verdict=None,
            )
        # A main turn calls a model (v4 records it); a stub turn calls none.
        model = MODELS[int(self._digest(session.session_id)[:8], 16) % len(MODELS)]
        ctx = replace(ctx, model=model, response_id=f"resp-{span.span_id}")
        event = self._main_turn(session, ctx, tokens)
        if task is not None:
            if session.task_step == 0:  # a task counts once it has a turn in the stream
                self.truth.tasks.append(task)
            session.task_step += 1
            if session.task_step >= task.steps:
                session.task = None
        return event

    def _digest(self, name: str) -> str:
        return hashlib.blake2b(f"{self.seed}/{name}".encode(), digest_size=24).hexdigest()

    def _span(self, session: _Session) -> Trace:
        """The runtime's span of this turn (v4's trace context): one trace per turn,
        derived from the seed, session and turn, so the turns' random draws stay as
        they were and the same seed gives the same ids."""
        digest = self._digest(f"{session.session_id}/{session.turn}")
        return Trace(digest[:32], digest[32:48])

    def _stub_turn(
        self, session: _Session, ctx: TurnContext, tokens: list[str]
    ) -> OutgoingTurnEvent | None:
        refused = self._rng.random() < 0.1
        safety = SafetyVerdict(not refused, (self._rng.choice(BOUNDARIES),) if refused else ())
        return session.builder.stub_turn(
            ctx,
            input_tokens=tokens,
            versor_condition=round(self._rng.uniform(1.0, 3.0), 4),
            safety_verdict=safety,
            ethics_verdict=EthicsVerdict(True),
            refusal_surface=f"{REFUSAL_PREFIX} I can't help with that." if refused else None,
        )

    def _main_turn(
        self, session: _Session, ctx: TurnContext, tokens: list[str]
    ) -> OutgoingTurnEvent:
        rng = self._rng
        task = session.task
        at_or_after_failure = (
            task is not None
            and task.oracle_alarm_turn is not None
            and session.task_step >= task.oracle_alarm_turn
        )
        failing_now = (
            at_or_after_failure and task is not None and session.task_step == task.oracle_alarm_turn
        )
        mode = task.failure_mode if task is not None and at_or_after_failure else None
        healthy_task = task is not None and not at_or_after_failure

        # Identity: a slow walk; collapses in a failing code-gen run.
        session.identity = min(0.99, max(0.55, session.identity + rng.uniform(-0.03, 0.03)))
        identity_value = session.identity
        if mode == "identity_collapse":
            identity_value = rng.uniform(0.05, 0.3)

        refusal_rate = 0.0 if healthy_task else 0.06
        refused = (mode == "refusal" and failing_now) or rng.random() < refusal_rate
        boundaries = (rng.choice(BOUNDARIES),) if refused else ()
        safety = SafetyVerdict(not refused, boundaries)
        hedge_wanted = not refused and rng.random() < 0.18
        predicates = (rng.choice(PREDICATES),) if hedge_wanted and rng.random() < 0.5 else ()
        ethics = EthicsVerdict(not predicates, predicates, hedge_recommended=hedge_wanted)

        articulation = f"Answer about {session.domain} #{session.turn}"
        if refused:
            surface_before = f"{REFUSAL_PREFIX} I can't help with that."
        elif hedge_wanted and rng.random() < 0.2:
            surface_before = f"{HEDGE} {articulation}"  # already hedged: not an injection
        else:
            surface_before = articulation
        surface = inject_hedge(surface_before, HEDGE) if hedge_wanted else surface_before

        action = self._action(rng, mode, failing_now, healthy_task)
        tools = self._tools(rng, task, mode)
        return session.builder.main_turn(
            ctx,
            input_tokens=tokens,
            walk_surface=f"walk:{session.domain}:{session.turn}",
            articulation_surface=articulation,
            surface_before_hedge=surface_before,
            surface=surface,
            identity_score=IdentityScore(round(identity_value, 4), IDENTITY_THRESHOLD),
            cycle_cost_total=round(rng.uniform(0.5, 40.0), 3),
            vault_hits=rng.randint(0, 12),
            versor_condition=round(rng.uniform(1.0, 3.0), 4),
            flagged=refused or rng.random() < 0.02,
            safety_verdict=safety,
            ethics_verdict=ethics,
            refusal_emitted=refused,
            action=action,
            tool_steps=tools,
        )

    @staticmethod
    def _action(
        rng: random.Random, mode: str | None, failing_now: bool, healthy_task: bool
    ) -> ActionAssessment | None:
        if mode == "action_void" and failing_now:
            return ActionAssessment.from_critic(
                "rm -rf build artefacts and force-push main", Verdict.VOID, RiskTier.CRITICAL, True
            )
        if rng.random() > 0.3:
            return None
        target = rng.choice(
            ("send email", "delete logs", "deploy to prod", "open file", "pay invoice")
        )
        if healthy_task:
            tier = rng.choice((RiskTier.LOW, RiskTier.MEDIUM))
            verdict = Verdict.SEAL if rng.random() < 0.8 else Verdict.HOLD
            return ActionAssessment.from_critic(target, verdict, tier, verdict is Verdict.HOLD)
        roll = rng.random()
        if roll < 0.03:
            return ActionAssessment.injection_detected_for(target)
        if roll < 0.06:
            return ActionAssessment.critic_unavailable_for(target)
        tier = rng.choice(list(RiskTier))
        verdict = rng.choices(list(Verdict), weights=(70, 20, 10))[0]
        return ActionAssessment.from_critic(target, verdict, tier, rng.random() < 0.15)

    @staticmethod
    def _tools(rng: random.Random, task: SimulatedTask | None, mode: str | None) -> list[ToolCall]:
        if task is None:
            return []
        if mode == "tool_failures":
            # The agent keeps calling the same failing tool.
            tool = TOOLS[len(task.task_id) % len(TOOLS)]
            return [ToolCall(tool, "{}", "error: timeout", ok=False) for _ in range(3)]
        calls = [ToolCall(rng.choice(TOOLS), "{}", "ok") for _ in range(rng.randint(0, 2))]
        if calls and rng.random() < 0.1:
            # Healthy runs see a transient tool error now and then, retried fine.
            calls.insert(0, ToolCall(calls[0].name, "{}", "error: 503, retrying", ok=False))
        return calls
