#!/usr/bin/env python3
# tests/install/test_install.py: installs the build into a scratch DESTDIR and checks what a client
# sees there: headers, library, software agent, tools, pkg-config, C and C++ clients that run.
"""Usage: test_install.py MESON BUILD_ROOT SOURCE_DIR VERSION CC CXX

Every step asserts and the first failure ends the test with a message naming the file or the
command; nothing is skipped (a missing compiler or pkg-config is a failure)."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

meson, build, src, version, cc, cxx = sys.argv[1:7]
work = os.path.join(build, 'tests', 'install', 'scratch')
dest = os.path.join(work, 'destdir')


def die(msg):
    print('FAIL: ' + msg)
    sys.exit(1)


def run(cmd, env=None, what=None):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        die('%s exited %d\n  command: %s\n  stdout: %s\n  stderr: %s' %
            (what or cmd[0], p.returncode, ' '.join(cmd), p.stdout.strip(), p.stderr.strip()))
    return p


for tool, name in ((cc, 'C compiler'), (cxx, 'C++ compiler (apt-get install g++)'),
                   ('pkg-config', 'pkg-config (apt-get install pkg-config)')):
    if not tool or not shutil.which(tool):
        die('no %s: %r' % (name, tool))

# ---- install
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
run([meson, 'install', '-C', build, '--no-rebuild', '--quiet', '--destdir', dest], what='meson install')

pcs = [os.path.join(d, f) for d, _, fs in os.walk(dest) for f in fs if f == 'hsamono.pc']
if len(pcs) != 1:
    die('expected one installed hsamono.pc, found %s' % pcs)
pcdir = os.path.dirname(pcs[0])
libdir = os.path.dirname(pcdir)
incdir = [os.path.join(d, 'hsamono') for d, ds, _ in os.walk(dest) if 'hsamono' in ds and d.endswith('include')]
if len(incdir) != 1:
    die('expected one include/hsamono directory under %s, found %s' % (dest, incdir))
incdir = incdir[0]
bindir = os.path.join(os.path.dirname(os.path.dirname(incdir)), 'bin')
for f in ('libhsamono.so.0', 'libhsamono-sim.so'):
    if not os.path.exists(os.path.join(libdir, f)):
        die('%s is not installed in %s' % (f, libdir))
for f in ('hsa-mono-info', 'hsa-mono-bench', 'hsa-mono-check'):
    if not os.access(os.path.join(bindir, f), os.X_OK):
        die('tool %s is not installed in %s' % (f, bindir))

# pkg-config sees the DESTDIR tree as its sysroot (the .pc names the real prefix); the system's
# own .pc files stay on its path for the Requires.private it resolves.
env = dict(os.environ)
env['PKG_CONFIG_PATH'] = pcdir
env['PKG_CONFIG_SYSROOT_DIR'] = dest
flags = run(['pkg-config', '--cflags', '--libs', 'hsamono'], env=env).stdout.split()
if not any(f == '-I' + os.path.dirname(incdir) for f in flags):
    die('pkg-config --cflags does not name the installed include directory %s: %s' %
        (os.path.dirname(incdir), flags))

# ---- the headers: the umbrella names each one, each stands alone in C and C++, prefixed names
headers = sorted(f for f in os.listdir(incdir) if f.endswith('.h'))
public = [h for h in headers if h != 'hsamono.h']
if 'hsamono.h' not in headers:
    die('no umbrella header hsamono.h in ' + incdir)
bad = [h for h in headers if not re.fullmatch(r'hm_[a-z0-9_]+\.h|hsamono\.h', h)]
if bad:
    die('installed headers without the hm_ prefix: %s' % bad)
umbrella = open(os.path.join(incdir, 'hsamono.h')).read()
named = set(re.findall(r'#include\s+"([^"]+)"', umbrella))
if named != set(public):
    die('hsamono.h includes %s; installed: %s' % (sorted(named), public))
for h in public:
    text = open(os.path.join(incdir, h)).read()
    if 'extern "C"' not in text:
        die('%s has no extern "C" guard' % h)

strict = ['-Wall', '-Wextra', '-pedantic', '-Werror', '-fsyntax-only']
for h in headers:
    unit = os.path.join(work, 'only_' + h.replace('.h', ''))
    with open(unit + '.c', 'w') as f:
        f.write('#include <hsamono/%s>\n' % h)
    run([cc, '-std=c11'] + strict + [unit + '.c'] + flags, env=env, what='C11 compile of <hsamono/%s> alone' % h)
    shutil.copy(unit + '.c', unit + '.cpp')
    run([cxx, '-std=c++17'] + strict + [unit + '.cpp'] + flags, env=env,
        what='C++17 compile of <hsamono/%s> alone' % h)

# Every macro the umbrella header defines beyond its standard headers is HM_-prefixed.
std = os.path.join(work, 'std.c')
with open(std, 'w') as f:
    f.write('#include <stdbool.h>\n#include <stddef.h>\n#include <stdint.h>\n')
uni = os.path.join(work, 'umbrella.c')
with open(uni, 'w') as f:
    f.write('#include <hsamono/hsamono.h>\n')


def macros(path):
    out = run([cc, '-std=c11', '-E', '-dM', path] + [x for x in flags if x.startswith('-I')], env=env).stdout
    return {m.split()[1].split('(')[0] for m in out.splitlines() if m.startswith('#define ')}


extra = sorted(m for m in macros(uni) - macros(std) if not m.startswith(('HM_', 'hm_')))
if extra:
    die('public headers define macros without the HM_ prefix: %s' % extra)

# Every file-scope name the headers declare (functions, typedefs, tags, enumerators, objects) is
# hm_/HM_-prefixed: the preprocessed text of the installed headers only, brace and paren depth
# tracked so members and parameters (scoped names) are left out.
pre = run([cc, '-std=c11', '-E', uni] + [x for x in flags if x.startswith('-I')], env=env).stdout
mine, keep = [], False
for line in pre.splitlines():
    m = re.match(r'# \d+ "([^"]+)"', line)
    if m:
        keep = os.path.realpath(m.group(1)).startswith(os.path.realpath(incdir))
    elif keep:
        mine.append(line)
toks = re.findall(r'[A-Za-z_]\w*|\S', '\n'.join(mine))
keywords = set('''typedef struct union enum const volatile static inline extern void char short int long
float double signed unsigned _Bool bool restrict __restrict __attribute__ __extension__ sizeof
_Static_assert return if else for while do break continue switch case default'''.split())
declared, stmt, depth, enum_depth, i = set(), [], 0, [], 0
while i < len(toks):
    t = toks[i]
    if t == '{':
        if 'enum' in toks[max(0, i - 2):i]:  # "enum {" or "enum tag {", at any depth (C scoping)
            enum_depth.append(depth + 1)
        if depth == 0:
            for j, s in enumerate(stmt):
                if s in ('struct', 'union', 'enum') and j + 1 < len(stmt) and re.match(r'\w', stmt[j + 1]):
                    declared.add(stmt[j + 1])
        depth += 1
    elif t == '}':
        if enum_depth and enum_depth[-1] == depth:
            enum_depth.pop()
        depth -= 1
        if depth == 0 and stmt and stmt[-1] == ')':  # the end of an inline function's body
            names = [s for k, s in enumerate(stmt[:-1]) if stmt[k + 1] == '(' and re.match(r'[A-Za-z_]', s)]
            declared.update(n for n in names[:1] if n not in keywords)
            stmt = []
    elif enum_depth and depth == enum_depth[-1]:
        if re.match(r'[A-Za-z_]', t) and (i == 0 or toks[i - 1] in ('{', ',')):
            declared.add(t)
    elif depth == 0:
        if t == ';':
            # the declarator: the name before the first '(' or ')' at paren depth 0..1, else the last name
            words = [s for s in stmt if re.match(r'[A-Za-z_]', s)]
            # "(*name)" as the statement's first parenthesis: a function-pointer typedef or object
            p0 = stmt.index('(') if '(' in stmt else -1
            fptr = [stmt[p0 + 2]] if 0 <= p0 < len(stmt) - 3 and stmt[p0 + 1] == '*' and stmt[p0 + 3] == ')' else []
            for j, s in enumerate([] if fptr else stmt):
                if s == '__attribute__':
                    break
                if re.match(r'[A-Za-z_]', s) and j + 1 < len(stmt) and stmt[j + 1] in ('(', ')') and s not in keywords:
                    declared.add(s)
                    break
            else:
                if fptr:
                    declared.add(fptr[0])
                elif words and words[-1] not in keywords:
                    declared.add(words[-1])
            for j, s in enumerate(stmt):
                if s in ('struct', 'union', 'enum') and j + 1 < len(stmt) and re.match(r'\w', stmt[j + 1]):
                    declared.add(stmt[j + 1])
            stmt = []
        else:
            stmt.append(t)
    i += 1
if not declared or 'hm_version' not in declared or 'HM_OK' not in declared:
    die('the name scan found nothing it should (hm_version, HM_OK): %s' % sorted(declared)[:20])
unprefixed = sorted(n for n in declared if not n.startswith(('hm_', 'HM_')))
if unprefixed:
    die('public headers declare names without the hm_/HM_ prefix: %s' % unprefixed)

# ---- the clients, built with nothing but pkg-config's flags, run against the installed files
renv = dict(os.environ)
renv.pop('HSAMONO_SIM_LIB', None)
renv.update({'LD_LIBRARY_PATH': libdir, 'HSAMONO_RUNTIME': 'sim', 'HSAMONO_SIM_AGENTS': '2', 'HSAMONO_SIM_CUS': '8'})
renv.pop('HSAMONO_LOG', None)
want = ['version ' + version, 'backend sim', 'agents 2', 'agent 0 gfx950 cus 8', 'agent 1 gfx950 cus 8']
for lang, compiler, source, std_flag in (('C', cc, 'client.c', '-std=c11'), ('C++', cxx, 'client.cpp', '-std=c++17')):
    exe = os.path.join(work, 'client_' + ('c' if lang == 'C' else 'cpp'))
    run([compiler, std_flag, '-Wall', '-Wextra', '-pedantic', '-Werror', '-o', exe, os.path.join(src, source)] + flags,
        env=env, what='building the %s client' % lang)
    p = run([exe], env=renv, what='the %s client' % lang)
    lines = p.stdout.splitlines()
    for w in want + ['layer 3 hidden 5120 experts 384'] + (['copy ok'] if lang == 'C' else []):
        if w not in lines:
            die('the %s client did not print %r; it printed:\n%s' % (lang, w, p.stdout))
    if p.stderr:
        die('the %s client wrote to stderr with HSAMONO_LOG unset:\n%s' % (lang, p.stderr))
    print('%s client: ok (%s)' % (lang, ', '.join(lines[:3])))

# under auto (the default) the library itself stays silent, whichever agent it picks
aenv = dict(renv, HSAMONO_RUNTIME='auto')
p = run([os.path.join(work, 'client_c')], env=aenv, what='the C client under HSAMONO_RUNTIME=auto')
if p.stderr or 'version ' + version not in p.stdout.splitlines():
    die('the C client under auto wrote to stderr or did not run:\n%s%s' % (p.stdout, p.stderr))

# the installed tool runs from the installed library too and says where it runs
p = run([os.path.join(bindir, 'hsa-mono-info')], env=renv, what='installed hsa-mono-info')
if 'HSA library: sim' not in p.stdout:
    die('installed hsa-mono-info did not report the software agent:\n' + p.stdout)
print('installed %d headers, libhsamono.so.0, libhsamono-sim.so, 3 tools; pkg-config: %s' % (len(headers), ' '.join(flags)))
