"""The permissions of one primitive: what its ACL rule must allow, and the probes."""

from __future__ import annotations

from .. import _scripts as scripts
from .._errors import InvalidArgument
from .._keys import DEFAULT_PREFIX, FENCED_MARKER, LatchKeys, fenced_keys
from .._ops import glob_escape
from .._plans.kinds import KINDS, by_name
from .._scripts import LOCK_ACQUIRE, ScriptSpec
from .._views import VIEWS
from .findings import NEEDED_COMMANDS, AclNeeds, CantCheck, Finding, Level, PrimitiveAcl
from .server import _unknown_command

# --- the permissions of one primitive ---------------------------------------------------------

#: The scripts each kind runs: every registered kind's
#: (:attr:`~tenure._plans.kind.Kind.scripts`), and a ``FencedKey``'s.
KIND_SCRIPTS: dict[str, tuple[ScriptSpec, ...]] = {
    **{k.name: k.scripts for k in KINDS},
    "FencedKey": (scripts.FENCED_SET,),
}

#: ``--kind`` values of ``tenure doctor`` and the kinds they name.
KIND_NAMES: dict[str, str] = {
    **{v.option: v.name for v in VIEWS},
    FENCED_MARKER: "FencedKey",
}

#: A waiter id standing for every waiter in the sample wake channel.
SAMPLE_WAITER = "0123abcd-0123abcd"


def acl_needs(
    kind: str, *, name: str | None = None, key: str | None = None, prefix: str = DEFAULT_PREFIX
) -> AclNeeds:
    """The permissions a primitive needs: ``kind`` one of :data:`KIND_SCRIPTS`, given
    by ``name`` (under ``prefix``), or by exact ``key`` (a ``Lock`` or a
    ``FencedKey``).

    Raises:
        InvalidArgument: an unknown kind, both or neither of ``name`` and ``key``,
            a ``key`` for a kind that has no exact-key mode, or a bad name/prefix.
    """
    if kind not in KIND_SCRIPTS:
        raise InvalidArgument(f"unknown kind {kind!r}; one of {', '.join(KIND_SCRIPTS)}")
    if (name is None) == (key is None):
        raise InvalidArgument("give exactly one of a name or a key")
    if key is not None and kind != "FencedKey" and not by_name(kind).exact_key:
        raise InvalidArgument(f"a {kind} has no exact-key mode: give its name")
    if kind == "FencedKey" and key is None:
        raise InvalidArgument("a FencedKey is given by its key")
    commands = {c for spec in KIND_SCRIPTS[kind] for c in spec.commands}
    commands |= {"EVALSHA", "SCRIPT LOAD", "INFO"}
    channels: tuple[str, ...]
    channel_patterns: tuple[str, ...]
    if kind == "FencedKey":
        assert key is not None
        value, seen = fenced_keys(key)
        commands |= {"GET"}
        commands.discard("PUBLISH")
        return AclNeeds(
            f"FencedKey({key!r})",
            (value, seen),
            (),
            (glob_escape(value), glob_escape(seen)),
            (),
            tuple(sorted(commands)),
            (),
        )
    commands |= {"SUBSCRIBE", "UNSUBSCRIBE"}
    label = f"{kind}(key={key!r})" if key is not None else f"{kind}({name!r}, prefix={prefix!r})"
    spec = by_name(kind)
    lk = spec.keys(name, key=key, prefix=prefix)
    keys = spec.acl_keys(lk)
    if isinstance(lk, LatchKeys):  # one broadcast channel, no wake channels
        base, channels = lk.count, (lk.channel,)
        channel_patterns = (glob_escape(lk.channel),)
    else:
        base = lk.wake_prefix[: -len(":wake:")]
        channels = (lk.wake_prefix + SAMPLE_WAITER,)
        channel_patterns = (glob_escape(lk.wake_prefix) + "*",)
        feed = getattr(lk, "channel", "")  # a broadcast channel besides the wakes (an election's)
        if feed:
            channels += (feed,)
            channel_patterns += (glob_escape(feed),)
    # the main key (an exact key apart from its helpers, or the base) and the helpers
    key_patterns = (glob_escape(keys[0]), glob_escape(base) + ":*")
    return AclNeeds(label, keys, channels, key_patterns, channel_patterns, tuple(sorted(commands)))


def _probe_args(command: str, needs: AclNeeds) -> tuple[str, ...]:
    """A command line of ``command`` for ``ACL DRYRUN``: its sample arguments in
    :data:`NEEDED_COMMANDS`, on ``needs``' first key and channel (``EVALSHA``
    with every key)."""
    main = needs.keys[0]
    channel = needs.channels[0] if needs.channels else "tenure-doctor"
    if command == "EVALSHA":
        return ("EVALSHA", LOCK_ACQUIRE.sha1, str(len(needs.keys)), *needs.keys)
    sample = {n.command: n.args for n in NEEDED_COMMANDS}.get(command, ("{lock}",))
    values = {"{channel}": channel, "{sha}": LOCK_ACQUIRE.sha1}
    keys = ("{lock}", "{fence}", "{waiters}", "{rlock}")
    args = (values.get(a, main if a in keys else a) for a in sample)
    return (*command.split(), *args)


def acl_probes(needs: AclNeeds) -> list[tuple[str, str, tuple[str, ...]]]:
    """``(permission, target, command line)`` for each ``ACL DRYRUN`` that checks
    ``needs``: ``read`` / ``write`` per key, ``channel`` per channel (PUBLISH and
    SUBSCRIBE), ``command`` per command, ``optional`` per ``min_replicas`` command."""
    probes: list[tuple[str, str, tuple[str, ...]]] = []
    for k in needs.keys:
        probes.append(("read", k, ("GET", k)))
        probes.append(("write", k, ("SET", k, "x")))
    for ch in needs.channels:
        probes.append(("channel", ch, ("PUBLISH", ch, "x")))
        probes.append(("channel", ch, ("SUBSCRIBE", ch)))
    for c in needs.commands:
        probes.append(("command", c, _probe_args(c, needs)))
    for c in needs.optional:
        probes.append(("optional", c, _probe_args(c, needs)))
    return probes


def check_primitive_acl(needs: AclNeeds, acl: PrimitiveAcl | CantCheck) -> list[Finding]:
    """Whether the user has every permission ``needs`` lists, and the least-privilege rule."""
    rule = Finding(
        "acl-rule",
        Level.NOTE,
        f"a least-privilege user for {needs.label} needs: {needs.advice()}",
    )
    if isinstance(acl, CantCheck):
        return [
            Finding("acl-primitive", Level.NOTE, f"can't check {needs.label}: {acl.reason}"),
            rule,
        ]
    # a command's probe refused for its key or channel is reported by that one's probe
    denied = [
        d
        for d in acl.denied
        if d[0] not in ("command", "optional")
        or not d[2].rstrip("'\" ").endswith(("key", "channel"))
    ]
    required = [d for d in denied if d[0] != "optional"]
    optional = [d for d in denied if d[0] == "optional" and not _unknown_command(d[2])]
    findings: list[Finding] = []
    if required:
        names = {"read": "read key", "write": "write key", "channel": "channel"}
        listed = "; ".join(
            f"{names[what]} {target!r}" if what in names else f"command {target}"
            for what, target, _ in required
        )
        findings.append(
            Finding(
                "acl-primitive",
                Level.HAZARD,
                f"user {acl.user!r} lacks what {needs.label} needs: {listed}",
                "give the user the rule below (tenure raises PermissionDenied, before any "
                "write, where one is missing)",
            )
        )
    else:
        findings.append(
            Finding(
                "acl-primitive",
                Level.OK,
                f"user {acl.user!r} has every key, channel and command permission "
                f"{needs.label} needs",
            )
        )
    if optional:
        findings.append(
            Finding(
                "acl-primitive",
                Level.NOTE,
                f"user {acl.user!r} may not run {' / '.join(t for _, t, _ in optional)}: "
                "min_replicas (WAIT; WAITAOF with replica_fsync) would fail",
            )
        )
    findings.append(rule)
    return findings
