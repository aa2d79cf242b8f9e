"""What ``import tenure`` leaves to first use, so that its import stays quick.

``import tenure`` imports the synchronous ``Lock`` (its facade, plans and
driver), and no more: the ``Async*`` classes, every other kind (``RLock``,
``FairLock``, ..., ``MultiLock``, ``Redlock``, with the modules only it needs),
the snapshot types of ``info()`` (``_info``), ``AdaptiveTTL``, the operator's
snapshots (``_plans.snapshot``) and the registry of kinds are imported on their
first use (the ``__getattr__`` of ``tenure`` and of the facade packages, the
first read plan, the hub's first pass-on), the Lua scripts are built on the
first read of their source, SHA-1 or commands (``_scripts._load``), and the
commands' modules (the CLI, ``doctor``, the operator's views, the embedded
server) only by the commands. Each check runs a fresh interpreter, whose
modules nothing else imported. The time it saves is measured by
``benchmarks/import_time.py`` (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.once

#: Modules ``import tenure`` must not import.
LAZY = (
    "tenure._api._async",
    "tenure._drivers._async",
    "tenure._drivers._runtime_async",
    "tenure._api._sync._holds",
    "tenure._api._sync.rlock",
    "tenure._api._sync.fair",
    "tenure._api._sync.rwlock",
    "tenure._api._sync.semaphore",
    "tenure._api._sync.latch",
    "tenure._api._sync.fenced",
    "tenure._api._sync.election",
    "tenure._api._sync.multi",
    "tenure._api._sync.redlock",
    "tenure._api._sync.redlock_election",
    "tenure._plans.rlock",
    "tenure._plans.fair",
    "tenure._plans.rwlock",
    "tenure._plans.semaphore",
    "tenure._plans.latch",
    "tenure._plans.fenced",
    "tenure._plans.election",
    "tenure._plans.kinds",
    "tenure._plans.snapshot",
    "tenure._keys.kinds",
    "tenure._info",
    "tenure._adaptive",
    "tenure._plans.multi",
    "tenure._plans.redlock",
    "tenure._plans.rounds",
    "tenure._plans.fanout",
    "tenure._drivers._sync.fanout",
    "tenure._drivers._fanout_shared",
    "tenure._cli",
    "tenure._doctor",
    "tenure._demo",
    "tenure._run",
    "tenure._ops",
    "tenure._views",
    "tenure._server",
    "tenure._shared_server",
    "argparse",
    "rich",
    "secrets",
)


def fresh(code: str) -> object:
    """What ``code``, run in a fresh interpreter, prints as JSON on its last line."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return json.loads(done.stdout.splitlines()[-1])


def test_import_tenure_imports_no_lazy_module_and_builds_no_script() -> None:
    found = fresh(
        "import json, sys\n"
        "import tenure\n"
        "from tenure._scripts import ALL, ScriptSpec\n"
        "def built(spec):\n"
        "    try:\n"
        "        ScriptSpec.sha1.__get__(spec, ScriptSpec)  # the slot: no build\n"
        "    except AttributeError:\n"
        "        return False\n"
        "    return True\n"
        "print(json.dumps({'modules': sorted(sys.modules),"
        " 'built': [s.name for s in ALL if built(s)], 'scripts': len(ALL)}))"
    )
    assert isinstance(found, dict)
    assert [m for m in LAZY if m in found["modules"]] == []
    assert found["scripts"] > 20 and found["built"] == []
    # every lazy module exists, so that a renamed one can't pass unnoticed
    tenure_lazy = [m for m in LAZY if m.startswith("tenure.")]
    assert fresh(
        "import importlib, json\n"
        f"print(json.dumps([bool(importlib.import_module(m)) for m in {tenure_lazy!r}]))"
    ) == [True] * len(tenure_lazy)


def test_an_async_name_is_the_asyncio_facades_class_named_tenures() -> None:
    found = fresh(
        "import json, sys\n"
        "import tenure\n"
        "before = 'tenure._api._async' in sys.modules\n"
        "listed = set(tenure.__all__) <= set(dir(tenure))\n"
        "from tenure import AsyncLock\n"
        "from tenure._api import _async\n"
        "names = [n for n in tenure.__all__ if n.startswith('Async')]\n"
        "same = [getattr(tenure, n) is getattr(_async, n) for n in names]\n"
        "modules = sorted({getattr(tenure, n).__module__ for n in tenure.__all__\n"
        "                  if isinstance(getattr(tenure, n), type)})\n"
        "star = {}\n"
        "exec('from tenure import *', star)\n"
        "print(json.dumps({'before': before, 'listed': listed, 'same': same,\n"
        "                  'modules': modules, 'star': sorted(set(tenure.__all__) - set(star)),\n"
        "                  'lock': AsyncLock.__module__ + '.' + AsyncLock.__qualname__}))"
    )
    assert isinstance(found, dict)
    assert found["before"] is False and found["listed"] is True
    assert len(found["same"]) > 10 and all(found["same"])
    assert found["modules"] == ["tenure"] and found["star"] == []
    assert found["lock"] == "tenure.AsyncLock"


def test_a_later_sync_class_is_the_facades_named_tenures() -> None:
    found = fresh(
        "import json\n"
        "import tenure\n"
        "from tenure._api import _sync\n"
        "before = [n for n in ('Redlock', 'MultiLock') if n in vars(_sync)]\n"
        "from tenure import Redlock\n"
        "from tenure._api._sync.redlock import Redlock as defined, RedlockLease\n"
        "print(json.dumps({'before': before, 'same': Redlock is defined is _sync.Redlock,\n"
        "                  'lease': RedlockLease.__module__, 'redlock': Redlock.__module__}))"
    )
    assert found == {
        "before": [],
        "same": True,
        "lease": "tenure",  # named tenure's once its module is imported
        "redlock": "tenure",
    }


def test_a_kind_imported_later_is_the_facades_named_tenures() -> None:
    """A kind's name imports its module and no other kind's; a module another
    one imported (an election's fair lock) is named tenure's with it."""
    found = fresh(
        "import json, sys\n"
        "import tenure\n"
        "def loaded():\n"
        "    return sorted(m for m in sys.modules if m.startswith('tenure._api._sync.'))\n"
        "before = loaded()\n"
        "tenure.Semaphore\n"
        "semaphore = loaded()\n"
        "tenure.Election\n"
        "from tenure._api import _sync\n"
        "fair = _sync.fair.FairLock\n"
        "print(json.dumps({'before': before, 'semaphore': semaphore,\n"
        "                  'fair': [fair.__module__, fair is tenure.FairLock],\n"
        "                  'lease': tenure.SemaphoreLease.__module__}))"
    )
    assert isinstance(found, dict)
    kinds = {m for m in LAZY if m.startswith("tenure._api._sync.")}
    assert "tenure._api._sync.lock" in found["before"] and not kinds & set(found["before"])
    assert set(found["semaphore"]) - set(found["before"]) == {"tenure._api._sync.semaphore"}
    assert found["fair"] == ["tenure", True]
    assert found["lease"] == "tenure"


def test_a_snapshot_built_before_its_name_was_read_is_tenures() -> None:
    """A plan's first snapshot imports ``_info``, whose classes then say they are
    tenure's (and pickle through ``tenure``) though ``tenure.LockInfo`` was never
    read; ``tenure.LockInfo`` is that class."""
    found = fresh(
        "import json, pickle, sys\n"
        "import tenure\n"
        "from tenure._plans.lock import lock_info\n"
        "before = 'tenure._info' in sys.modules\n"
        "info = lock_info('orders', 'abc.1:def', 1, 1500, 7, 0)\n"
        "bound = 'LockInfo' in vars(tenure)\n"
        "again = pickle.loads(pickle.dumps(info))\n"
        "print(json.dumps({'before': before, 'bound': bound,\n"
        "                  'module': type(info).__module__,\n"
        "                  'same': type(info) is tenure.LockInfo and again == info}))"
    )
    assert found == {"before": False, "bound": False, "module": "tenure", "same": True}


def test_tenure_looks_a_snapshot_name_up_in_info_and_no_other() -> None:
    """``tenure._SNAPSHOTS`` (the names its ``__getattr__`` imports from
    ``_info``) are the classes ``_info`` defines, all named tenure's."""
    import tenure
    from tenure import _info

    classes = {n for n, c in vars(_info).items() if isinstance(c, type) and n[0] != "_"}
    assert classes == set(tenure._SNAPSHOTS) <= set(tenure.__all__)
    assert {getattr(_info, n).__module__ for n in classes} == {"tenure"}


@pytest.mark.parametrize("module", ["tenure", "tenure._api._sync", "tenure._api._async"])
def test_a_name_a_package_lacks_is_an_attribute_error(module: str) -> None:
    import importlib

    package = importlib.import_module(module)
    name = "AsyncNothing"  # (a constant attribute would fail mypy: tenure has no such name)
    with pytest.raises(AttributeError, match=f"'{module}' has no attribute '{name}'"):
        getattr(package, name)


def test_a_script_built_on_first_use_is_the_one_built_at_once() -> None:
    """Whichever field is read first, a script is built in full and its SHA-1 is
    its source's (what EVALSHA names)."""
    found = fresh(
        "import hashlib, json\n"
        "from tenure._scripts import ALL, _read, build\n"
        "out = []\n"
        "for i, spec in enumerate(ALL):\n"
        "    first = ('sha1', 'source', 'commands')[i % 3]\n"
        "    getattr(spec, first)\n"
        "    out.append([spec.name, spec == build(spec.name, _read),\n"
        "                spec.sha1 == hashlib.sha1(spec.source).hexdigest(), spec.writes])\n"
        "print(json.dumps(out))"
    )
    assert isinstance(found, list) and len(found) > 20
    for name, same, sha_of_source, writes in found:
        assert same and sha_of_source, name
        assert writes is not name.endswith("_inspect"), name


def test_threads_reading_later_names_at_once_each_get_the_class() -> None:
    """Threads that read names of kinds imported later at the same moment
    each get the class, never an error from a module another thread is still
    importing (five fresh interpreters: the race needs the first look-ups)."""
    names = [
        "RLock",
        "FairLock",
        "ReadWriteLock",
        "Semaphore",
        "CountDownLatch",
        "MultiLock",
        "Redlock",
        "Election",
        "RedlockElection",
        "AsyncSemaphore",
        "AsyncReadWriteLock",
        "AsyncElection",
    ]
    code = (
        "import json, threading\n"
        "import tenure\n"
        f"names = {names!r} * 2\n"
        "got, errors = {}, []\n"
        "start = threading.Barrier(len(names))\n"
        "def read(name):\n"
        "    start.wait()\n"
        "    try:\n"
        "        got[name] = getattr(tenure, name).__name__\n"
        "    except Exception as exc:\n"
        "        errors.append(f'{name}: {type(exc).__name__}: {exc}')\n"
        "threads = [threading.Thread(target=read, args=(n,)) for n in names]\n"
        "[t.start() for t in threads]\n"
        "[t.join() for t in threads]\n"
        "print(json.dumps({'errors': errors, 'got': sorted(got.items())}))"
    )
    for _ in range(5):
        found = fresh(code)
        assert isinstance(found, dict)
        assert found["errors"] == []
        assert found["got"] == sorted([n, n] for n in names)
