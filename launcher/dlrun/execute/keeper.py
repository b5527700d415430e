"""The first process of every local job: it keeps the job's whole process tree and ends it as a whole.

Run as `python -I -S keeper.py DLRUN_PID GRACE DEATH_GRACE ARGV...` (standard library only, imports nothing
from dlrun). It makes itself the job's child subreaper (PR_SET_CHILD_SUBREAPER), so that every process of the
job stays its descendant however it detaches (a daemon's double fork, `setsid`, a cleared environment), asks
the kernel for SIGUSR1 when dlrun dies (PR_SET_PDEATHSIG; a check of its parent every second backs it up),
and runs ARGV as its child. Then:

- ARGV ends: what it left behind is ended (SIGTERM, SIGKILL after GRACE seconds), and the keeper exits as ARGV
  did (its exit code, or the same signal), so that dlrun sees the job's own ending.
- dlrun dies (SIGKILL, a crash): every descendant gets SIGTERM, and SIGKILL after DEATH_GRACE seconds, so
  that nothing of the job outlives its dlrun by more than a few seconds, a process that ignores SIGTERM
  included. The next dlrun command recovers the run (dlrun.execute.recovery).

SIGTERM, SIGINT and SIGHUP do not end the keeper while its job runs: dlrun ends a job by signalling all of
its processes (dlrun.execute.procs), and the keeper leaves once they are gone.
"""
import ctypes
import os
import resource
import signal
import sys
import time

PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
WATCH_S = 1.0  # how often the keeper checks its parent besides the kernel's signal
KILL_WAIT_S = 5.0


class Orphaned(Exception):
    """dlrun, the keeper's parent, is gone."""


def descendants():
    """Live processes below this one (zombies are not alive)."""
    children = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as handle:
                fields = handle.read().rpartition(b")")[2].split()
        except OSError:
            continue
        if fields and fields[0] not in (b"Z", b"X"):
            children.setdefault(int(fields[1]), []).append(int(name))
    found, todo = set(), [os.getpid()]
    while todo:
        for pid in children.get(todo.pop(), ()):
            if pid not in found:
                found.add(pid)
                todo.append(pid)
    return found


def _kill(pid, sig):
    try:
        os.kill(pid, sig)
    except OSError:
        pass


class Keeper:
    def __init__(self, parent, argv):
        self.parent, self.argv = parent, argv
        self.child, self.status = None, None

    def watch(self, signum, frame):
        if os.getppid() != self.parent:
            raise Orphaned

    def start(self):
        libc = ctypes.CDLL(None, use_errno=True)
        try:
            libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGUSR1), 0, 0, 0)
        except (OSError, AttributeError):
            pass
        signal.signal(signal.SIGUSR1, self.watch)
        signal.signal(signal.SIGALRM, self.watch)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda signum, frame: None)  # a handler, not SIG_IGN: the job must not inherit it
        if os.getppid() != self.parent:
            sys.exit(143)  # dlrun died before the requests took effect
        self.child = os.fork()
        if self.child == 0:
            self.exec_job()
        signal.setitimer(signal.ITIMER_REAL, WATCH_S, WATCH_S)

    def exec_job(self):
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # as a shell would start it (Python ignores these)
            signal.signal(sig, signal.SIG_DFL)
        try:
            os.execvp(self.argv[0], self.argv)
        except OSError as exc:
            os.write(2, ("dlrun: cannot run %s: %s\n" % (self.argv[0], exc.strerror)).encode())
        os._exit(127)

    def reap(self, block=False):
        """Collect ended children (the job's orphans are ours too); False when none is left to wait for."""
        while True:
            try:
                pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                return True
            if pid == self.child:
                self.status = status
                if block:
                    return True

    def end_all(self, grace):
        """SIGTERM (and SIGCONT, so that stopped ones receive it) to every descendant, SIGKILL to those left
        after `grace` seconds, until none is left."""
        signalled = set()
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            left = descendants()
            if not left:
                return
            for pid in left - signalled:
                for sig in (signal.SIGTERM, signal.SIGCONT):
                    _kill(pid, sig)
            signalled |= left
            time.sleep(0.05)
            self.reap()
        deadline = time.monotonic() + KILL_WAIT_S
        while time.monotonic() < deadline:
            left = descendants()
            if not left:
                return
            for pid in left:
                _kill(pid, signal.SIGKILL)
            time.sleep(0.02)
            self.reap()

    def exit_as_child(self):
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        status = self.status if self.status is not None else 127 << 8
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the job dumped its core already, if at all
            if sig not in (signal.SIGKILL, signal.SIGSTOP):
                signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
            os._exit(128 + sig)
        os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def main(args):
    parent, grace, death_grace, argv = int(args[0]), float(args[1]), float(args[2]), args[3:]
    keeper = Keeper(parent, argv)
    keeper.start()
    try:
        while keeper.status is None and keeper.reap(block=True):
            pass
        keeper.end_all(grace)  # what the job left behind
    except Orphaned:
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        keeper.end_all(death_grace)
        os._exit(143)
    keeper.exit_as_child()


if __name__ == "__main__":
    main(sys.argv[1:])
