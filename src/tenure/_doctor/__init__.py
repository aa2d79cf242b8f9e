"""``tenure doctor``: the server settings that break locks, each with what to do.

:func:`gather_facts` asks the server (``INFO`` sections, ``CONFIG GET
appendfsync``, ``CLUSTER INFO``, ``ACL WHOAMI`` and ``ACL DRYRUN``); a reply
the server refuses (denied by ACL, command renamed or missing) becomes
:class:`CantCheck`, reported as "can't check X", never a crash. That is the
only I/O: :func:`diagnose` turns the :class:`Facts` into :class:`Finding` s, so
every rule is tested with canned replies.

A finding is ``ok``, a ``note`` (worth knowing, including every check that
could not be made) or a ``hazard`` (a setting under which a lock can be lost
or granted twice). ``tenure doctor`` exits with status 1 when there is a
hazard, 0 otherwise.

JSON (``doctor --json``; stable: new keys may be added, none removed or
renamed)::

    {"server": {"name": "valkey", "version": "9.1.2", "mode": "standalone"} | null,
     "hazards": 1,
     "findings": [{"check": "appendonly", "level": "ok" | "note" | "hazard",
                   "message": "...", "advice": "..."}, ...]}

``check`` is one of ``version``, ``appendonly``, ``appendfsync``,
``maxmemory-policy``, ``replication``, ``replica``, ``replicas``,
``replication-lag``, ``cluster``, ``acl``, ``sentinel`` (on a Sentinel: the
masters it monitors; a Sentinel gets only this and ``version``), and with ``--name`` / ``--key``
``acl-primitive`` (whether the user has every key, channel and command
permission that primitive needs: :func:`acl_needs`, checked with ``ACL
DRYRUN``) and ``acl-rule`` (the ``ACL SETUSER`` rule a least-privilege user
needs for it).

Against a Redis Cluster (``tenure doctor`` given a cluster node's URL), each
master is gathered and diagnosed on its own, and ``doctor --json`` prints
``{"cluster": true, "hazards": <sum>, "nodes": [{"node": "host:port",
"server": ..., "hazards": ..., "findings": [...]}, ...]}`` (one report per
master, sorted by address).
"""

from .acl import KIND_NAMES as KIND_NAMES
from .acl import KIND_SCRIPTS as KIND_SCRIPTS
from .acl import SAMPLE_WAITER as SAMPLE_WAITER
from .acl import acl_needs as acl_needs
from .acl import acl_probes as acl_probes
from .acl import check_primitive_acl as check_primitive_acl
from .findings import NEEDED_COMMANDS as NEEDED_COMMANDS
from .findings import AclCheck as AclCheck
from .findings import AclNeeds as AclNeeds
from .findings import CantCheck as CantCheck
from .findings import Facts as Facts
from .findings import Finding as Finding
from .findings import Level as Level
from .findings import Needed as Needed
from .findings import PrimitiveAcl as PrimitiveAcl
from .findings import Reply as Reply
from .findings import Report as Report
from .findings import ServerIdentity as ServerIdentity
from .findings import dryrun_args as dryrun_args
from .gather import diagnose as diagnose
from .gather import gather_facts as gather_facts
from .report import print_report as print_report
from .report import report_lines as report_lines
from .server import MAX_LAG as MAX_LAG
from .server import check_acl as check_acl
from .server import check_cluster as check_cluster
from .server import check_eviction as check_eviction
from .server import check_persistence as check_persistence
from .server import check_replication as check_replication
from .server import check_sentinel as check_sentinel
from .server import check_version as check_version
from .server import identify as identify
