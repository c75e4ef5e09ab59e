#!/usr/bin/env python3
"""Runs upstream Placement's gabbi API tests against our placement server.

For each selected gabbit (YAML file) a worker starts a FRESH server on its own
database and a free loopback port, creates the file's fixture data through
the HTTP API (fixtures.py, classes named like upstream's), runs the file's
tests in order with gabbi's Python API and stops the server. The database is
a new SQLite file, or, with `--databases MAP.json`, the (empty) database whose
URL the map gives for the file: how the Rust test runs the files on
PostgreSQL, each on a fresh database it created. Every test of a
file runs, also after an earlier one failed (as under upstream's own test
runner); a test counts as passed only if it passed. A fixture that fails
fails the file's first test and leaves the others skipped; skipped tests
count as not passed.

The orchestrator needs only the standard library. The workers run in a
virtualenv with the pinned gabbi (requirements.txt); `--venv DIR` names it
and it is created or brought up to date there when needed (pip from PyPI).

    python3 placement/conformance/run.py --venv target/conformance-venv \
        --binary target/debug/placement              # the selected files
    python3 placement/conformance/run.py --venv ... --binary ... \
        --detail inventory.yaml                      # one file, failures in full
    python3 placement/conformance/run.py --list      # the selected file names

Exit status: 0 ran (whatever the count; with --floor: and passed >= floor),
1 below the floor, 2 usage error, 3 environment unavailable (python venv,
pip or PyPI): callers may treat 3 as "skip".
"""

import argparse
import concurrent.futures
import contextlib
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_GABBITS = os.path.normpath(
    os.path.join(REPO, '..', 'shared', 'upstream', 'placement-gabbits'))
REQUIREMENTS = os.path.join(HERE, 'requirements.txt')
EXIT_BELOW_FLOOR, EXIT_USAGE, EXIT_ENV = 1, 2, 3

# Files that need server-side policy or CORS configuration upstream.
EXCLUDED_SUFFIXES = ('-policy.yaml', '-legacy-rbac.yaml', '-secure-rbac.yaml')
EXCLUDED_NAMES = ('cors.yaml', 'non-cors.yaml')


def selected_files(gabbits_dir):
    names = sorted(n for n in os.listdir(gabbits_dir) if n.endswith('.yaml'))
    return [n for n in names
            if not n.endswith(EXCLUDED_SUFFIXES) and n not in EXCLUDED_NAMES]


# Virtualenv -----------------------------------------------------------------

class EnvUnavailable(Exception):
    """python's venv, pip or PyPI cannot be had here."""


def venv_python(venv):
    return os.path.join(venv, 'bin', 'python')


def ensure_venv(venv):
    """Creates `venv` or installs requirements.txt into it when it changed."""
    with open(REQUIREMENTS, 'rb') as f:
        want = hashlib.sha256(f.read()).hexdigest()
    marker = os.path.join(venv, '.conformance-requirements')
    os.makedirs(os.path.dirname(os.path.abspath(venv)), exist_ok=True)
    lock_path = os.path.abspath(venv).rstrip('/') + '.lock'
    with open(lock_path, 'w') as lock:
        try:
            import fcntl
            fcntl.flock(lock, fcntl.LOCK_EX)
        except ImportError:
            pass
        try:
            with open(marker) as f:
                if f.read().strip() == want and os.path.exists(
                        venv_python(venv)):
                    return
        except OSError:
            pass
        if not os.path.exists(venv_python(venv)):
            r = subprocess.run([sys.executable, '-m', 'venv', venv],
                               capture_output=True, text=True)
            if r.returncode != 0:
                raise EnvUnavailable('python3 -m venv failed: %s'
                                     % r.stderr.strip()[-500:])
        r = subprocess.run(
            [venv_python(venv), '-m', 'pip', 'install', '--quiet',
             '--disable-pip-version-check', '-r', REQUIREMENTS],
            capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise EnvUnavailable('pip install -r requirements.txt failed: %s'
                                 % (r.stderr.strip() or r.stdout)[-800:])
        with open(marker, 'w') as f:
            f.write(want + '\n')


# Worker: one file, one fresh server ----------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def placement_server(binary, workdir, database=None):
    """A fresh server on `database` (an empty database's URL) or, without
    it, on a new SQLite file; yields its base URL and log path."""
    last_error = None
    db = database or 'sqlite://%s/p.sqlite?mode=rwc' % workdir
    for _ in range(5):
        port = free_port()
        log_path = os.path.join(workdir, 'server-%d.log' % port)
        log = open(log_path, 'wb')
        env = dict(os.environ)
        env.setdefault('RUST_LOG', 'warn')
        proc = subprocess.Popen(
            [binary, '--database', db, '--listen', '127.0.0.1:%d' % port,
             '--auth-strategy', 'noauth2'],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env)
        url = 'http://127.0.0.1:%d' % port
        deadline = time.monotonic() + 60
        up = False
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(url + '/', timeout=2) as r:
                    up = r.status == 200
                    break
            except OSError:
                time.sleep(0.05)
        if up:
            try:
                yield url, log_path
            finally:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                log.close()
            return
        proc.kill()
        proc.wait()
        log.close()
        with open(log_path, 'rb') as f:
            last_error = f.read().decode('utf-8', 'replace')[-2000:]
    raise RuntimeError('placement server did not start: %s' % last_error)


def _outcome_message(err):
    """The assertion's message, not the whole traceback."""
    exc_type, exc, _tb = err
    text = ''.join(traceback.format_exception_only(exc_type, exc)).strip()
    return text


def send_malformed_lengths_raw():
    """Makes gabbi send a request whose Content-Length is not an integer.

    basic-http.yaml sends `content-length: hi mom` on purpose. Upstream runs
    its gabbits in-process through WSGI, where nothing checks that header on
    the way; gabbi's HTTP client (httpx) refuses to send it to a live server.
    Such a request is written to a plain socket instead, exactly as the test
    gives it, and the server's answer read back; every other request goes
    through gabbi's client as usual. Needs gabbi importable.
    """
    import http.client
    import socket

    import httpx
    from gabbi import httpclient

    def integer(value):
        value = value.strip()
        return value.isascii() and value.isdigit()

    class RawWhenMalformed(httpx.BaseTransport):
        def __init__(self, inner):
            self.inner = inner

        def handle_request(self, request):
            length = request.headers.get('content-length')
            if length is None or integer(length):
                return self.inner.handle_request(request)
            url = request.url
            head = [b'%s %s HTTP/1.1' % (request.method.encode(),
                                         url.raw_path)]
            head += [b'%s: %s' % (k, v) for k, v in request.headers.raw]
            data = b'\r\n'.join(head) + b'\r\n\r\n' + request.read()
            timeout = request.extensions.get('timeout', {}).get('read') or 30
            with socket.create_connection((url.host, url.port or 80),
                                          timeout=timeout) as sock:
                sock.sendall(data)
                resp = http.client.HTTPResponse(sock, method=request.method)
                resp.begin()
                content = resp.read()
                return httpx.Response(resp.status, headers=resp.getheaders(),
                                      content=content, request=request)

        def close(self):
            self.inner.close()

    original_init = httpclient.Http.__init__

    def init(self, **kwargs):
        original_init(self, **kwargs)
        self.client._transport = RawWhenMalformed(self.client._transport)

    httpclient.Http.__init__ = init


def run_file_in_worker(path, binary, detail, database=None):
    """Runs one gabbit; returns its result dict. Needs gabbi importable."""
    import unittest

    sys.path.insert(0, HERE)
    import fixtures
    from gabbi import handlers, suitemaker, utils

    send_malformed_lengths_raw()

    name = os.path.basename(path)
    workdir = tempfile.mkdtemp(prefix='placement-conformance-')
    tests = []
    try:
        with placement_server(binary, workdir, database) as (url, log_path):
            os.environ[fixtures.URL_ENV] = url
            host, port = url.rsplit('//', 1)[1].split(':')
            suite_dict = utils.load_yaml(yaml_file=path, safe=True)
            handler_objects = [h() for h in handlers.RESPONSE_HANDLERS]
            base = os.path.splitext(name)[0]
            file_suite = suitemaker.test_suite_from_dict(
                unittest.TestLoader(), base, suite_dict,
                os.path.dirname(path), host, int(port), fixtures, None,
                test_loader_name='conformance', handlers=handler_objects)

            outcomes = {}

            class Result(unittest.TestResult):
                def _set(self, test, status, err=None):
                    full = ''
                    if err and not issubclass(err[0], AssertionError):
                        full = self._exc_info_to_string(err, test)
                    outcomes[id(test)] = (status, _outcome_message(err), full)

                def addSuccess(self, test):
                    super().addSuccess(test)
                    if id(test) not in outcomes:
                        outcomes[id(test)] = ('passed', '', '')

                def addFailure(self, test, err):
                    super().addFailure(test, err)
                    self._set(test, 'failed', err)

                def addError(self, test, err):
                    super().addError(test, err)
                    self._set(test, 'failed', err)

                def addSkip(self, test, reason):
                    super().addSkip(test, reason)
                    if id(test) not in outcomes:
                        outcomes[id(test)] = ('skipped', reason, '')

                def addExpectedFailure(self, test, err):
                    super().addExpectedFailure(test, err)
                    outcomes[id(test)] = ('passed', '', '')

                def addUnexpectedSuccess(self, test):
                    super().addUnexpectedSuccess(test)
                    outcomes[id(test)] = ('failed', 'unexpected success', '')

            cases = list(file_suite)
            file_suite.run(Result())
            for test in cases:
                status, msg, full = outcomes.get(
                    id(test), ('skipped', 'not run', ''))
                tests.append({'name': test.test_data['name'],
                              'status': status, 'message': msg,
                              'detail': full if detail else ''})
            server_log = ''
            if detail:
                with open(log_path, 'rb') as f:
                    server_log = f.read().decode('utf-8', 'replace')[-4000:]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    counts = {s: sum(1 for t in tests if t['status'] == s)
              for s in ('passed', 'failed', 'skipped')}
    first = next((t for t in tests if t['status'] != 'passed'), None)
    return {
        'file': name,
        'total': len(tests),
        **counts,
        'first_failure': ('%s: %s' % (first['name'], first['message'])
                          if first else None),
        'tests': tests,
        'server_log': server_log,
    }


def worker_main(args):
    try:
        result = run_file_in_worker(args.worker, args.binary, args.detail,
                                    args.database)
    except Exception as exc:  # a crash of the harness or the server
        result = {'file': os.path.basename(args.worker), 'total': 0,
                  'passed': 0, 'failed': 0, 'skipped': 0,
                  'first_failure': 'harness error: %s' % exc,
                  'error': traceback.format_exc(), 'tests': []}
    with open(args.worker_out, 'w') as f:
        json.dump(result, f)
    return 0


# Orchestrator ----------------------------------------------------------------

def count_tests(path):
    """Tests in a file without gabbi (for files whose worker crashed)."""
    n, indent, in_tests = 0, None, False
    with open(path, encoding='utf-8') as f:
        for line in f:
            if line.startswith('tests:'):
                in_tests = True
                continue
            m = re.match(r'(\s*)-\s+name:', line)
            if in_tests and m and indent in (None, m.group(1)):
                indent = m.group(1)
                n += 1
    return n


def run_one(python, binary, path, detail, timeout, database=None):
    with tempfile.NamedTemporaryFile(suffix='.json', delete=False) as tmp:
        out = tmp.name
    cmd = [python, os.path.abspath(__file__), '--worker', path,
           '--worker-out', out, '--binary', binary]
    if detail:
        cmd.append('--detail')
    if database:
        cmd += ['--database', database]
    started = time.monotonic()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True,
                           timeout=timeout)
        with open(out) as f:
            result = json.load(f)
    except (subprocess.TimeoutExpired, OSError, ValueError) as exc:
        stderr = getattr(exc, 'stderr', None) or ''
        if 'r' in locals():
            stderr = r.stderr
        total = count_tests(path)
        result = {'file': os.path.basename(path), 'total': total,
                  'passed': 0, 'failed': total, 'skipped': 0,
                  'first_failure': 'worker failed: %s %s' % (
                      exc, str(stderr)[-1000:]), 'tests': []}
    finally:
        with contextlib.suppress(OSError):
            os.unlink(out)
    if result['total'] == 0 and 'error' in result:
        total = count_tests(path)
        result.update(total=total, failed=total)
    result['seconds'] = round(time.monotonic() - started, 2)
    return result


def print_table(results, out):
    width = max([len(r['file']) for r in results] + [4])
    print('%-*s %6s %6s %6s %6s' % (width, 'file', 'total', 'pass',
                                   'fail', 'skip'), file=out)
    for r in results:
        print('%-*s %6d %6d %6d %6d' % (width, r['file'], r['total'],
                                        r['passed'], r['failed'],
                                        r['skipped']), file=out)


def print_detail(r, out):
    print('== %s: %d/%d passed' % (r['file'], r['passed'], r['total']),
          file=out)
    if r.get('error'):
        print(r['error'], file=out)
    for t in r['tests']:
        if t['status'] == 'passed':
            continue
        print('-- %s [%s]' % (t['name'], t['status']), file=out)
        print(t['message'], file=out)
        if t.get('detail'):
            print('\n'.join(t['detail'].splitlines()[-12:]), file=out)
    if r.get('server_log'):
        print('-- server log (tail)\n' + r['server_log'], file=out)


def backend_of(url):
    """`postgres` or `sqlite`: the floor.txt key of a database URL."""
    return 'postgres' if url.startswith(('postgres:', 'postgresql:')) \
        else 'sqlite'


def read_floor(path, backend):
    """The floor of `backend` in floor.txt (lines `BACKEND PASSED`)."""
    with open(path) as f:
        for line in f:
            words = line.split('#', 1)[0].split()
            if len(words) == 2 and words[0] == backend:
                return int(words[1])
    raise ValueError('%s has no line for %s' % (path, backend))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('files', nargs='*',
                   help='gabbit file names (default: the selection)')
    p.add_argument('--venv', default=os.environ.get(
        'PLACEMENT_CONFORMANCE_VENV'),
        help='virtualenv for gabbi, created when missing '
             '(env PLACEMENT_CONFORMANCE_VENV)')
    p.add_argument('--binary', default=os.environ.get(
        'PLACEMENT_BIN', os.path.join(REPO, 'target', 'debug', 'placement')),
        help='placement server binary (env PLACEMENT_BIN)')
    p.add_argument('--gabbits', default=os.environ.get(
        'PLACEMENT_GABBITS', DEFAULT_GABBITS),
        help='directory of upstream gabbits (env PLACEMENT_GABBITS)')
    p.add_argument('--jobs', '-j', type=int, default=4)
    p.add_argument('--json', help='write the JSON summary to this file')
    p.add_argument('--floor', help='fail (exit 1) below the backend\'s '
                   'number in FILE (floor.txt)')
    p.add_argument('--databases', metavar='MAP.json',
                   help='JSON object: gabbit file name -> URL of an empty '
                        'database for its server (default: a new SQLite '
                        'file per file)')
    p.add_argument('--list', action='store_true',
                   help='print the selected file names and exit')
    p.add_argument('--detail', '-v', action='store_true',
                   help='print every failure in full')
    p.add_argument('--all', action='store_true',
                   help='all files, also policy/CORS ones')
    p.add_argument('--timeout', type=float, default=300,
                   help='seconds per file')
    p.add_argument('--worker', help=argparse.SUPPRESS)
    p.add_argument('--worker-out', help=argparse.SUPPRESS)
    p.add_argument('--database', help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.worker:
        return worker_main(args)

    if not os.path.isdir(args.gabbits):
        print('SKIP: no gabbits directory at %s (set PLACEMENT_GABBITS)'
              % args.gabbits, file=sys.stderr)
        return EXIT_ENV
    if args.files:
        names = [os.path.basename(f) for f in args.files]
    elif args.all:
        names = sorted(n for n in os.listdir(args.gabbits)
                       if n.endswith('.yaml'))
    else:
        names = selected_files(args.gabbits)
    missing = [n for n in names
               if not os.path.exists(os.path.join(args.gabbits, n))]
    if missing:
        print('no such gabbit: %s' % ', '.join(missing), file=sys.stderr)
        return EXIT_USAGE
    if args.list:
        print('\n'.join(names))
        return 0
    if not os.access(args.binary, os.X_OK):
        print('no placement binary at %s (cargo build -p placement)'
              % args.binary, file=sys.stderr)
        return EXIT_USAGE
    databases = {}
    if args.databases:
        with open(args.databases) as f:
            databases = json.load(f)
        unmapped = [n for n in names if n not in databases]
        if unmapped:
            print('no database in %s for: %s'
                  % (args.databases, ', '.join(unmapped)), file=sys.stderr)
            return EXIT_USAGE
    backends = {backend_of(databases[n]) for n in names} if databases \
        else {'sqlite'}
    if len(backends) != 1:
        print('--databases mixes backends: %s' % ', '.join(sorted(backends)),
              file=sys.stderr)
        return EXIT_USAGE
    backend = backends.pop()

    if args.venv:
        try:
            ensure_venv(args.venv)
        except (EnvUnavailable, subprocess.TimeoutExpired) as exc:
            print('SKIP: conformance environment unavailable: %s' % exc,
                  file=sys.stderr)
            return EXIT_ENV
        python = venv_python(args.venv)
    else:
        python = sys.executable
    r = subprocess.run([python, '-c', 'import gabbi'], capture_output=True)
    if r.returncode != 0:
        print('SKIP: gabbi is not importable by %s (pass --venv DIR)'
              % python, file=sys.stderr)
        return EXIT_ENV

    binary = os.path.abspath(args.binary)
    started = time.monotonic()
    paths = [os.path.join(args.gabbits, n) for n in names]
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        results = list(pool.map(
            lambda path: run_one(python, binary, path, args.detail,
                                 args.timeout,
                                 databases.get(os.path.basename(path))),
            paths))

    passed = sum(r['passed'] for r in results)
    total = sum(r['total'] for r in results)
    summary = {
        'backend': backend,
        'passed': passed,
        'failed': total - passed,
        'skipped': sum(r['skipped'] for r in results),
        'total': total,
        'files': len(results),
        'seconds': round(time.monotonic() - started, 1),
        'per_file': [{k: v for k, v in r.items()
                      if k not in ('tests', 'server_log', 'error')}
                     for r in results],
    }
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(summary, f, indent=1)
    out = sys.stdout
    if args.detail:
        for r in results:
            if r['passed'] != r['total']:
                print_detail(r, out)
    else:
        for r in results:
            if r.get('error'):
                print('== %s: harness error\n%s' % (r['file'], r['error']),
                      file=out)
    print_table(results, out)
    print('conformance on %s: %d passed, %d failed'
          % (backend, passed, total - passed), file=out)
    if args.floor:
        floor = read_floor(args.floor, backend)
        if passed < floor:
            print('BELOW FLOOR: %d passed < %s floor %d (%s)'
                  % (passed, backend, floor, args.floor), file=out)
            return EXIT_BELOW_FLOOR
        print('%s floor %d: ok' % (backend, floor), file=out)
    return 0


if __name__ == '__main__':
    sys.exit(main())
