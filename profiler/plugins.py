"""Plugins from installed distributions: a registry's built-ins, then its entry points.

Each of the four plugin kinds has one registry (``profiler.engines.ENGINES``,
``profiler.cluster.PROVIDERS``, ``profiler.agent.collectors.PLUGINS``,
``profiler.study.STUDIES``), a ``Registry``: a mapping of name → plugin holding the
built-ins, to which the entry points of its group (``edgeprof.engines``,
``edgeprof.providers``, ``edgeprof.collectors``, ``edgeprof.studies``) of every installed
distribution are added, as torchrun finds rendezvous handlers and pytest its plugins
(``importlib.metadata.entry_points``)::

    [project.entry-points."edgeprof.engines"]
    torch-solo = "edgeprof_solo:SoloEngine"

The entry point's name is the plugin's name; it names a class or an instance of the
kind's base class (``Engine``, ``ClusterSettings``, ``Collector``, ``Study``).

They load once, on the first lookup of the registry (not when its module is imported),
and a plugin that cannot be used does not stop the others nor any command that does
not name it: it does not import, it names something else than the base class, its name
is not its entry point's, a built-in or another distribution has that name. It is
logged once (WARNING) and left out; a command that names it gets its one line
(``PluginError``, exit 2), which names the distribution and the fix.

In the bottom layer (the standard library and ``profiler.errors``): the agent loads its
collectors' plugins with it, and imports nothing of the controller.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import MutableMapping
from importlib.metadata import EntryPoint, entry_points
from typing import Callable, Generic, Iterable, Iterator, TypeVar

from .errors import PluginError

log = logging.getLogger(__name__)

T = TypeVar("T")


class Registry(MutableMapping[str, T], Generic[T]):
    """Name → plugin: the ``builtins`` given, then the plugins of entry point ``group``.

    ``base``: what a plugin must be (``instances``: an instance of it, made by calling a
    class named with no arguments; otherwise a subclass). ``kind``: what the messages
    call one (``engine``). ``named``: whether a plugin carries its name (``.name``, which
    must be its entry point's); ``check``: the kind's own check of a plugin, returning
    what is wrong with it (a clash of a collector's fields) or None.

    Writing to it (a test's ``monkeypatch.setitem``) loads the plugins first.
    """

    def __init__(self, group: str, base: type, builtins: dict[str, T], *, kind: str,
                 instances: bool = False, named: bool = True,
                 check: Callable[[T], str | None] | None = None):
        self.group, self.base, self.kind = group, base, kind
        self.instances, self.named, self.check = instances, named, check
        self._items: dict[str, T] = dict(builtins)
        self._builtins = tuple(builtins)
        self._origins: dict[str, tuple[str, str]] = {}  # name → distribution, version
        self._broken: dict[str, str] = {}  # a plugin's name → what is wrong, one line
        self._loaded = self._loading = False
        self._lock = threading.RLock()

    # The mapping: every access loads the plugins first.
    def __getitem__(self, name: str) -> T:
        return self._all()[name]

    def __setitem__(self, name: str, value: T) -> None:
        self._all()[name] = value

    def __delitem__(self, name: str) -> None:
        del self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def __contains__(self, name: object) -> bool:
        return name in self._all()

    def __repr__(self) -> str:
        return f"Registry({self.group!r}, {list(self._items)!r})"

    def origin(self, name: str) -> str | None:
        """The distribution (``name version``) a plugin came from; None for a built-in."""
        self._all()
        return " ".join(self._origins[name]) if name in self._origins else None

    def distribution(self, name: str) -> str | None:
        """The name of the distribution a plugin came from; None for a built-in."""
        self._all()
        return self._origins[name][0] if name in self._origins else None

    def problem(self, name: str) -> str | None:
        """Why the plugin ``name`` was left out (one line naming its distribution and
        the fix), or None: it loaded, or no distribution has it."""
        self._all()
        return self._broken.get(name)

    def broken(self) -> dict[str, str]:
        """Every plugin left out: name → why."""
        self._all()
        return dict(self._broken)

    def refuse_broken(self, names: Iterable[str]) -> None:
        """Raise ``PluginError`` with the line of the first of ``names`` that is a
        plugin left out (the user named it); nothing for the others."""
        for name in names:
            problem = self.problem(name) if name not in self else None
            if problem is not None:
                raise PluginError(problem)

    def fresh(self) -> "Registry[T]":
        """This registry as built, its plugins not loaded yet (a test that installs a
        distribution after this process looked its plugins up)."""
        return Registry(self.group, self.base, {n: self._items[n] for n in self._builtins},
                        kind=self.kind, instances=self.instances, named=self.named,
                        check=self.check)

    def _all(self) -> dict[str, T]:
        if not self._loaded:
            with self._lock:  # another thread waits for the plugins
                # A plugin's module that reads the registry while it loads (this thread
                # again) sees what is loaded so far, not a second load.
                if not self._loaded and not self._loading:
                    self._loading = True
                    try:
                        self._load()
                    finally:
                        self._loaded, self._loading = True, False
        return self._items

    def _load(self) -> None:
        for point in _points(self.group):
            name, origin = point.name, _distribution(point)
            try:
                plugin = self._plugin(point, *origin)
            except PluginError as exc:
                # Left out (a built-in keeps its name); a name's first problem is said.
                self._broken.setdefault(name, str(exc))
                log.warning("%s", exc)
                continue
            self._items[name] = plugin
            self._origins[name] = origin

    def _plugin(self, point: EntryPoint, distribution: str, version: str) -> T:
        """The checked plugin an entry point names, or ``PluginError``."""
        name, kind = point.name, self.kind
        where = f"plugin {kind} {name!r} of {distribution} {version}"
        uninstall = f"pip uninstall {distribution}"
        if name in self._builtins:
            raise PluginError(f"{where} has the name of a built-in {kind}: rename it (its "
                              f"entry point{' and its name' if self.named else ''}), or "
                              f"{uninstall}")
        if name in self._origins:
            raise PluginError(f"{where} has the name of {_a(kind)} of {self.origin(name)}: "
                              f"uninstall one of the two distributions, or rename one")
        try:
            value = point.load()
        except Exception as exc:  # noqa: BLE001 - any failure of a plugin's import
            raise PluginError(f"{where} does not load ({point.value}: {_said(exc)}): fix "
                              f"or reinstall it, or {uninstall}") from None
        plugin = self._made(value, point, where)
        if self.named and getattr(plugin, "name", None) != name:
            raise PluginError(f"{where} names {_a(kind)} called "
                              f"{getattr(plugin, 'name', None)!r}: give the entry point its "
                              f"{kind}'s name, or the {kind} its entry point's")
        problem = self.check(plugin) if self.check is not None else None
        if problem:
            raise PluginError(f"{where} {problem}")
        return plugin

    def _made(self, value: object, point: EntryPoint, where: str) -> T:
        """The plugin from what the entry point names: an instance of ``base``, or a
        subclass (instantiated when the registry holds instances)."""
        base = f"{self.base.__module__}.{self.base.__qualname__}"
        if isinstance(value, type) and issubclass(value, self.base):
            if not self.instances:
                return value  # type: ignore[return-value]
            try:
                return value()
            except Exception as exc:  # noqa: BLE001 - any failure of the plugin's own code
                raise PluginError(f"{where} does not build ({point.value}(): "
                                  f"{_said(exc)}): give its class a constructor that "
                                  "takes no arguments, or name an instance") from None
        if self.instances and isinstance(value, self.base):
            return value  # type: ignore[return-value]
        wanted = (f"a {base} subclass or instance" if self.instances
                  else f"a {base} subclass")
        raise PluginError(f"{where} names {point.value}, {_what(value)}, not {wanted}: "
                          f"point its entry point at {wanted}")


def _points(group: str) -> list[EntryPoint]:
    """The entry points of ``group`` of every installed distribution (each once)."""
    return list(entry_points(group=group))


def _distribution(point: EntryPoint) -> tuple[str, str]:
    """The name and version of the distribution that declares ``point``."""
    dist = getattr(point, "dist", None)
    if dist is None:  # entry points made by hand, not read from a distribution
        return point.module.split(".")[0], "(not installed)"
    return dist.name, dist.version


def _said(exc: BaseException) -> str:
    """An exception as one short line."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__


def _a(noun: str) -> str:
    return f"an {noun}" if noun[0] in "aeiou" else f"a {noun}"


def _what(value: object) -> str:
    if isinstance(value, type):
        return f"the class {value.__qualname__}"
    return f"a {type(value).__name__}"
