"""A compile that runs in its own thread and can be stopped: the engine's decode graph while it
serves eagerly.

`torch.compile` has no way to be asked to stop, and a thread still inside it when the
interpreter exits is killed in the middle of C++ code: the process aborts ("terminate called
without an active exception", status 134) instead of exiting with its own status. A thread still
compiling while the next engine is built shares the allocator and compiler state with it. So a
compile is stopped by raising `CompileStopped` in its thread, which the interpreter delivers at
the thread's next Python instruction: at once while dynamo traces or inductor generates code. While
inductor waits for a C++ compiler it runs no Python (one g++ run of the C++ wrapper takes 40-50 s
on 2 cores), so the compilers this process started are killed too, which returns control at once.
The thread is then joined: by `stop()` when an engine is closed or replaced, and at interpreter
exit for every compile still running (`atexit` runs before daemon threads are killed).

At exit the join has a deadline. Once the interpreter is shutting down no new thread can start,
and a compile thread waiting in `Thread.start` (Inductor's code generation starts tqdm's monitor
thread) waits in C, where CompileStopped never reaches it: a library script hung at exit for 14
minutes at 0% CPU. tqdm's monitor is turned off while compiles run, and a thread
that still has not ended by the deadline is left behind, blocked, for the process's exit.

A compile must not change what the engine's own thread runs meanwhile. fx's plain tracer patches
`nn.Module.__call__` for every thread while it traces, and Inductor traces one helper with it, once
per process: an eager step that ran during that trace called its modules through the tracer and
failed ("NameError: module is not installed as a submodule"; twice in one day's test runs).
That trace is done before the compile thread starts, on the thread that starts it.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path

# The programs inductor runs to build its C++ kernels and wrapper (and what they run in turn).
_COMPILERS = {"g++", "gcc", "c++", "cc", "clang", "clang++"}
# How long stop() waits for a stopped compile thread before raising CompileStopped in it again.
_DELIVER_AGAIN_AFTER_S = 2.0
# At interpreter exit, how long each compile still running gets to end once stopped.
EXIT_DEADLINE_S = 20.0


class CompileStopped(BaseException):
    """Raised inside a compile thread to end it. A BaseException, so that neither torch's error
    handling nor the compile's own fallback (which catches Exception) mistakes it for a failure."""


class BackgroundCompile:
    """Runs `target` once in a daemon thread; `stop()` ends it early and waits for the thread."""

    def __init__(self, target: Callable[[], None], name: str):
        self._target = target
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._lock = threading.Lock()
        self._finished = False
        self.stopped = False  # stop() ended the compile before it finished

    def start(self) -> None:
        _trace_inductors_helper_here()
        _quiet_about_lost_stops()
        _no_tqdm_monitor()
        _running.add(self)
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self, deadline_s: float | None = None) -> bool:
        """End the compile if it is still running and wait for its thread (at most `deadline_s`
        seconds, if given); whether the thread has ended."""
        with self._lock:
            if not self._finished and self._thread.ident is not None:
                self.stopped = True
                self._interrupt()
        give_up_at = None if deadline_s is None else time.monotonic() + deadline_s
        while self._thread.ident is not None and self._thread.is_alive():
            if give_up_at is not None and time.monotonic() >= give_up_at:
                return False
            self._thread.join(timeout=_DELIVER_AGAIN_AFTER_S)
            # Python ignores an exception raised inside a weakref callback or __del__ ("Exception
            # ignored in ..."): a CompileStopped delivered there is lost and the compile runs on
            # (seen once in `make test`, a close() that waited out the whole compile). Deliver it again.
            with self._lock:
                if self._thread.is_alive() and not self._finished:
                    self._interrupt()
        return True

    def _interrupt(self) -> None:
        """Raise CompileStopped in the compile thread and kill the compilers it waits on."""
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread.ident), ctypes.py_object(CompileStopped))
        kill_compiler_processes()

    def _run(self) -> None:
        try:
            self._target()
        except CompileStopped:
            pass
        finally:
            try:
                with self._lock:
                    self._finished = True
            except CompileStopped:  # raised by a stop() that took the lock just before this thread did
                pass
            _running.discard(self)


def _trace_inductors_helper_here() -> None:
    """Build Inductor's one plain-fx graph (InterpreterShim's placeholder, cached for the process)
    on this thread, so that no compile thread traces it while this one steps eagerly."""
    from torch._inductor.loop_body import InterpreterShim

    InterpreterShim._dummy_gm()


def _quiet_about_lost_stops() -> None:
    """A CompileStopped that lands in a `__del__` or weakref callback is lost and `stop()` delivers
    it again; Python still printed "Exception ignored in ...: CompileStopped" on stderr, which a
    user reads as a crash. Only those go unsaid; every other unraisable error is reported as before."""
    if getattr(sys.unraisablehook, "quiet_about_lost_stops", False):
        return
    report = sys.unraisablehook

    def hook(unraisable) -> None:
        if not isinstance(unraisable.exc_value, CompileStopped):
            report(unraisable)

    hook.quiet_about_lost_stops = True
    sys.unraisablehook = hook


def _no_tqdm_monitor() -> None:
    """tqdm's monitor thread off: a compile thread that starts it during the interpreter's
    shutdown waits for ever for a thread that cannot start."""
    try:
        import tqdm
    except ImportError:
        return
    tqdm.tqdm.monitor_interval = 0


def kill_compiler_processes() -> list[int]:
    """Kill the C/C++ compilers this process started, directly or through inductor's compile
    workers (whose futures the compile thread may be waiting on, in C, where no exception reaches
    it), with everything they started (cc1plus, as, ld); their ids. Linux only (it reads /proc);
    elsewhere nothing is killed and `stop` waits."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended while we looked
            continue
        name, fields = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
        parents[int(stat.parent.name)] = (int(fields[1]), name)
    descendants = [os.getpid()]
    for pid in descendants:  # a breadth-first walk down from this process
        descendants += [child for child, (parent, _) in parents.items() if parent == pid]
    doomed = [pid for pid in descendants[1:] if parents[pid][1] in _COMPILERS]
    for pid in doomed:  # the compilers' own children go too
        doomed += [child for child, (parent, _) in parents.items() if parent == pid and child not in doomed]
    for pid in doomed:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return doomed


_running: weakref.WeakSet[BackgroundCompile] = weakref.WeakSet()


@atexit.register
def _stop_running_compiles() -> None:
    for compile_ in list(_running):
        if not compile_.stop(EXIT_DEADLINE_S):
            print(
                f"workbench: a background compile did not stop within {EXIT_DEADLINE_S:g} s of the exit; "
                "leaving it behind",
                file=sys.stderr,
            )
