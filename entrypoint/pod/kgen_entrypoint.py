# kgen_entrypoint.py as kgen render ships it: comments, docstrings and the bare-metal and Slurm parts left out, one space per indentation level, line numbers kept; the whole file: `kgen entrypoint`
"""kgen in-pod entrypoint: node rank, readiness, torchrun, diagnostics and fail-stop.

Usage (what `kgen render` puts in the pod; also works by hand on bare metal):

    python3 kgen_entrypoint.py -- train.py --lr 3e-4     # a script, passed to torchrun as is
    python3 kgen_entrypoint.py -- -m pkg.module args     # a module (torchrun -m)
    python3 kgen_entrypoint.py -- ./run.sh args          # anything else: torchrun --no-python
    python3 kgen_entrypoint.py --smoke-test              # all-reduce check instead of training
    python3 kgen_entrypoint.py --diagnose                # one PASS/FAIL line per check
    python3 kgen_entrypoint.py --stop                    # stop the whole group (run's environment, any host)
    python3 kgen_entrypoint.py --run-dir DIR --state     # bare metal: a node's run state (kgen launch)
    srun ... python3 kgen_entrypoint.py --slurm-node RUN -- train.py   # Slurm: one task per node (slurm.md)

Environment (docs/design.md is the contract): NNODES, NPROC_PER_NODE, MASTER_ADDR, MASTER_PORT,
node rank from NODE_RANK > JOB_COMPLETION_INDEX > KGEN_POD_INDEX > HOSTNAME ordinal (inside a Slurm
job step: NNODES, the node rank, MASTER_ADDR and MASTER_PORT come from the allocation), optional
KGEN_LIVENESS_PORT (default MASTER_PORT+1), KGEN_LIVENESS_BIND (where node 0 listens: IPs or *),
KGEN_JOB_NAME, KGEN_KIND, KGEN_RUN_ID, KGEN_RESTART_ATTEMPT, KGEN_MASTER_WAIT_TIMEOUT,
KGEN_RDZV_TIMEOUT, KGEN_HEARTBEAT_INTERVAL, KGEN_HEARTBEAT_TIMEOUT, KGEN_MAX_RESTARTS,
KGEN_MAX_REFORMATIONS, KGEN_REPLACEMENT_TIMEOUT, KGEN_ON_SCRIPT_ERROR, KGEN_HANG_TIMEOUT, KGEN_HEALTH_GATE
(KGEN_HEALTH_TIMEOUT), and for NNODES > 1
the run's secret, the same on every node (the liveness channel authenticates every connection with it):
KGEN_SECRET_FILE (a file holding it), or KGEN_JOB_UID (Kubernetes Job and JobSet pods: the UID of the
pod's Job, from its batch.kubernetes.io/controller-uid label; the secret is derived from it with
KGEN_NAMESPACE and KGEN_JOB_NAME). Set for the training processes: KGEN_RESTART_COUNT (the
generation, 0 first), KGEN_RDZV_ID, KGEN_PROGRESS_FILE (kgen_progress(step): the hang watchdog).

Exit codes: 0 success; 2 bad environment, usage or no torch; 3 node 0 not reachable (within
KGEN_MASTER_WAIT_TIMEOUT, or KGEN_REPLACEMENT_TIMEOUT after a loss); 4 the group could not form
(nodes missing after KGEN_RDZV_TIMEOUT, or a lost node's replacement after KGEN_REPLACEMENT_TIMEOUT);
5 the run failed as a whole (re-formation limit, another node's script error or internal error); 6
stopped by user (Ctrl-C / SIGINT on any node, or --stop): every node of the group exits 6; 70 kgen's
own entrypoint failed on this node (an internal error, a bug in kgen, not in the training script: the
traceback is in the log; report it); 75 a peer was lost and re-formation is off
(KGEN_MAX_REFORMATIONS=0); 76 this node was dropped from the group (it froze or was cut off): replace
it; 77 a hang (KGEN_HANG_TIMEOUT: no rank made progress; node 0's log has the report); 78 the health
gate failed before training (KGEN_HEALTH_GATE=fail; node 0's log names the node); otherwise
torchrun's exit code; 128+N after signal N. The last log line says why:
"kgen-entrypoint: stopped: <reason>".

Standard library only in the supervising parent; torch is imported by the smoke-test worker and
by the GPU check of --diagnose. How it works and what was measured: docs/entrypoint.md.
"""

from __future__ import annotations


import contextlib
import errno
import hmac
import json
import math
import os
import random
import re
import secrets
import selectors
import shlex
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time


EXIT_OK=0
EXIT_CONFIG=2
EXIT_MASTER_UNREACHABLE=3
EXIT_PEERS_MISSING=4
EXIT_RUN_FAILED=5
EXIT_STOPPED=6
EXIT_INTERNAL=70
EXIT_PEER_LOST=75
EXIT_DROPPED=76
EXIT_HANG=77


ABORT_GRACE=3.0
SIGNAL_GRACE=20.0
PROGRESS_EVERY=10.0
BACKOFF_FIRST,BACKOFF_MAX=0.05,1.0

REFUSED_RATE=2000.0
LOOKUP_RATE=200.0
HANDSHAKE_TIMEOUT=5.0
FAIL_VERDICT_WAIT=2.0
STOP_GRACE=10.0
STOP_LINGER=5.0
STOP_BUDGET=5.0
DENIED_BOUND=60.0
LISTEN_BUSY_BOUND=15.0
RECORD_BOUND=30.0
PROTOCOL=3


SECRET_MIN,SECRET_MAX=32,4096
AUTH_TIMEOUT=3.0
MAX_UNPROVEN=128
PREAUTH_LINE_MAX=1024
LINE_MAX=65536
MAX_DEPTH=8
TEXT_MAX=4096
STRANGER_LOG_BURST,STRANGER_LOG_WINDOW=10,10.0

DEFAULTS={
 'KGEN_MASTER_WAIT_TIMEOUT':600.0,
 'KGEN_RDZV_TIMEOUT':300,
 'KGEN_HEARTBEAT_INTERVAL':1.0,
 'KGEN_HEARTBEAT_TIMEOUT':5.0,
 'KGEN_MAX_RESTARTS':0,
 'KGEN_MAX_REFORMATIONS':10,
 'KGEN_REPLACEMENT_TIMEOUT':300.0,
 'KGEN_ON_SCRIPT_ERROR':'fail',
}
ON_SCRIPT_ERROR=('fail','reform')

_TAG='kgen'
_T0=time.monotonic()


_OUT=threading.Lock()


DROPPED=[0]


def script_path():


 here=os.path.abspath(__file__)
 up=os.path.dirname(here)
 return up if os.path.basename(here)=='__main__.py'and os.path.isfile(up)else here


def emit(stream,text):

 with _OUT:
  try:
   stream.write(text)
   stream.flush()
  except(OSError,ValueError):
   DROPPED[0]+=max(1,text.count('\n'))


def printable(text,backslash=False):



 if text.isprintable()and not(backslash and'\\'in text):
  return text
 return''.join(c if c.isprintable()and(c!='\\'or not backslash)else repr(c)[1:-1]for c in text)


def shown(value,limit=200):

 if not isinstance(value,str):
  scalar=value is None or isinstance(value,(bool,float))or(isinstance(value,int)and abs(value)<1<<64)
  value=repr(value)if scalar else f'<{type(value).__name__}>'
 text=printable(value,backslash=True)
 return text if len(text)<=limit else text[:limit]+'...'


def _utc_stamp(t=None):
 t=time.time()if t is None else t
 return time.strftime('%Y-%m-%dT%H:%M:%S',time.gmtime(t))+f'.{int(t % 1 * 1e6):06d}Z'


def log(msg):
 stamp=time.strftime('%H:%M:%S',time.gmtime())
 emit(sys.stderr,f'[{_TAG} {stamp} +{time.monotonic() - _T0:.1f}s] {printable(msg)}\n')


class Stop(Exception):


 def __init__(self,code,reason):
  super().__init__(reason)
  self.code,self.reason=code,reason


def internal_error(exc,doing=''):



 import traceback

 try:
  for line in''.join(traceback.format_exception(type(exc),exc,exc.__traceback__)).splitlines():
   sys.stderr.write(printable(line)+'\n')
 except Exception:
  pass
 reason=internal_reason(_TAG[5:]if _TAG.startswith('kgen node')else'this host',exc)
 log(f'{reason} while {doing}: contained there, the run goes on'if doing else reason)
 return reason


def internal_reason(where,exc):
 what=exc if isinstance(exc,str)else f'{type(exc).__name__}: {shown(str(exc), 300)}'
 return f'kgen entrypoint internal error on {where}: {what} (report it)'


def fatal(code,lines):
 lines=[lines]if isinstance(lines,str)else lines
 emit(sys.stderr,''.join(f'kgen-entrypoint: error: {printable(line)}\n'for line in lines))
 raise Stop(code,'configuration error'if code==EXIT_CONFIG else lines[0])












class Config:


 def __init__(self):
  self.problems:list[str]=[]

  self.nnodes:int=None
  self.nproc:int=None
  self.master_port:int=None
  self.liveness_port:int=None
  self.master_addr=''
  self.node_rank:int|None=None
  self.rank_source=''
  self.rank_looked_at:list[str]=[]
  self.job_name=self.kind=self.run_id=''
  self.restart_attempt=''
  self.master_wait=self.hb_interval=self.hb_timeout=0.0
  self.rdzv_timeout=self.max_restarts=self.max_reformations=0
  self.replacement_timeout=0.0
  self.on_script_error='fail'
  self.secret:bytes|None=None
  self.secret_file=''
  self.secret_source=''
  self.secret_from_uid=False
  self.secret_problem=''
  self.liveness_bind:list[str]=[]
  self.notes:list[str]=[]
  self.slurm:dict|None=None
  self.restart_base=0
  self.hang_timeout=0.0
  self.health_gate='warn'

 @property
 def world_size(self):
  return self.nnodes*self.nproc

 @property
 def rdzv_id(self):
  run=self.run_id or'local'
  if self.secret_from_uid and self.run_id:
   run=hmac.new(b'kgen rendezvous id',run.encode(),'sha256').hexdigest()[:16]
  base=f"{self.job_name or 'kgen'}-{run}"
  return f'{base}-attempt{self.restart_attempt}'if self.restart_attempt else base

 @property
 def is_master(self):
  return self.node_rank==0

 def summary(self):
  return(
   f'node {self.node_rank}/{self.nnodes} (rank from {self.rank_source}), '
   f'{self.nproc} process(es) per node, world size {self.world_size}; '
   f'master {self.master_addr}:{self.master_port}, liveness port {self.liveness_port}; '
   f'rendezvous static id={self.rdzv_id} timeout={self.rdzv_timeout}s; '
   f'master wait {self.master_wait:g}s; heartbeat every {self.hb_interval:g}s, '
   f'peer lost after {self.hb_timeout:g}s of silence; '
   +(
    f're-formations up to {self.max_reformations}, replacement wait {self.replacement_timeout:g}s'
    if self.slurm is None
    else f'a lost node ends the step, requeues up to {self.max_reformations}'
   )
   +f', on script error: {self.on_script_error}, health gate: {self.health_gate}'
   +(f'; run secret from {self.secret_source}'if self.secret is not None else'')
  )


def _raw(env,name):
 value=env.get(name)
 if value is None or value.strip()=='':
  return None
 return value.strip()


def _number(env,name,problems,kind,default=None,lo=None,hi=None,fix=''):
 raw=_raw(env,name)
 if raw is None:
  if default is None:
   problems.append(f'{name} is not set: {fix}')
  return default
 try:
  value=kind(raw)
  if kind is float and not math.isfinite(value):
   raise ValueError
 except ValueError:
  what='an integer'if kind is int else'a number'
  problems.append(f'{name}={raw!r} is not {what}: {fix}')
  return None
 if(lo is not None and value<lo)or(hi is not None and value>hi):
  bounds=f'>= {lo}'if hi is None else f'between {lo} and {hi}'
  problems.append(f'{name}={raw!r} must be {bounds}: {fix}')
  return None
 return value


def derive_rank(env,nnodes,cfg):

 looked=cfg.rank_looked_at
 for name in('NODE_RANK','JOB_COMPLETION_INDEX','KGEN_POD_INDEX'):
  raw=env.get(name)
  if raw is None or raw.strip()=='':
   looked.append(f"{name} ({'unset' if raw is None else 'empty'})")
   continue
  try:
   rank=int(raw.strip())
  except ValueError:
   cfg.problems.append(
    f'{name}={raw!r} is not an integer node rank: set it to a number in [0, NNODES) or unset it'
   )
   return
  cfg.rank_source=f'{name}={raw.strip()}'
  break
 else:
  host=env.get('HOSTNAME')or socket.gethostname()
  job=(env.get('KGEN_JOB_NAME')or'').strip()
  match=None
  if job and host.startswith(job+'-')and host[len(job)+1:].isdigit():
   match=host[len(job)+1:]
  else:
   found=re.search(r'-(\d+)$',host)
   match=found.group(1)if found else None
  if match is None:
   looked.append(f'HOSTNAME={host!r} (no -<n> ordinal suffix)')
   cfg.problems.append(
    'cannot derive the node rank: looked at '+', '.join(looked)+'; set '
    'NODE_RANK=<0..NNODES-1> (bare metal) or run as an Indexed Job / StatefulSet pod'
   )
   return
  rank=int(match)
  cfg.rank_source=f'HOSTNAME={host}'
 if nnodes is not None and not 0<=rank<nnodes:
  cfg.problems.append(
   f'node rank {rank} (from {cfg.rank_source}) is outside [0, NNODES={nnodes}): make '
   f"NNODES equal to the Job's completions / StatefulSet's replicas, or fix the rank"
  )
  return
 cfg.node_rank=rank


SECRET_HOWTO=(
 "create one with `umask 077; python3 -c 'import secrets; print(secrets.token_hex(32))' > ~/.kgen-secret` "
 "and give every node the same file (Kubernetes: kgen render mounts the run's Secret and sets it)"
)


UUID4=re.compile(r'[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\Z')


def secret_from_job_uid(uid,namespace,job):


 return hmac.new(uid.encode(),f'kgen run secret v2\0{namespace}/{job}'.encode(),'sha256').hexdigest().encode()


def read_secret(env,cfg):



 path=_raw(env,'KGEN_SECRET_FILE')
 uid=env.get('KGEN_JOB_UID')
 problem=''
 if path is not None and uid is not None:
  problem="KGEN_SECRET_FILE and KGEN_JOB_UID are both set: the run's secret comes from one of them; unset one"
 elif uid is not None:
  uid=uid.strip()
  cfg.secret_source="the Job's UID (KGEN_JOB_UID)"
  if not uid:
   problem=(
    'KGEN_JOB_UID is empty: this pod has no batch.kubernetes.io/controller-uid label, which the Job '
    'controller (Kubernetes 1.27+) puts on every pod of a Job; run it as a Job or JobSet, or give '
    'the run a Secret of your own (values auth.secretName)'
   )
  elif not UUID4.match(uid):
   problem=(
    f'KGEN_JOB_UID={uid[:40]!r} is not a random (version 4) UUID as the API server makes for every Job: '
    f"the run's secret is derived from it; give the run a Secret of your own (values auth.secretName)"
   )
  else:
   cfg.secret=secret_from_job_uid(uid,(env.get('KGEN_NAMESPACE')or'').strip(),cfg.job_name)
   cfg.secret_from_uid=True
 elif path is None:
  problem=f"KGEN_SECRET_FILE is not set: a multi-node run needs the run's secret; {SECRET_HOWTO}"
 else:
  cfg.secret_file=path
  cfg.secret_source=f'KGEN_SECRET_FILE={path}'
  data=b''
  try:
   fd=os.open(path,os.O_RDONLY|os.O_NONBLOCK|getattr(os,'O_CLOEXEC',0))
  except OSError as exc:
   problem=f'KGEN_SECRET_FILE={path!r}: cannot read it ({exc.strerror or exc}); {SECRET_HOWTO}'
   secret_name=(env.get('KGEN_AUTH_NAME')or'').strip()
   if exc.errno==errno.ENOENT and secret_name:
    ns=(env.get('KGEN_NAMESPACE')or'').strip()
    problem=(
     f"the run's secret is missing: Secret {secret_name} (key `secret`, mounted at "
     f"{os.path.dirname(path)}) does not exist{' in namespace ' + ns if ns else ''}; create it: "
     f'{create_secret_line(secret_name, ns, cfg.job_name)} (kgen submit creates it for you); the '
     f'pod starts over once it exists'
    )
  else:
   try:
    info=os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
     problem=f'KGEN_SECRET_FILE={path!r} is not a regular file; {SECRET_HOWTO}'
    else:
     while len(data)<=SECRET_MAX:
      chunk=os.read(fd,SECRET_MAX+1-len(data))
      if not chunk:
       break
      data+=chunk
     problem=secret_mode_problem(path,info.st_mode,env,cfg)
   except OSError as exc:
    problem=f'KGEN_SECRET_FILE={path!r}: cannot read it ({exc.strerror or exc}); {SECRET_HOWTO}'
   finally:
    os.close(fd)
  secret=data.strip()
  if problem:
   pass
  elif len(data)>SECRET_MAX:
   problem=f'KGEN_SECRET_FILE={path!r} is larger than {SECRET_MAX} bytes: not a secret file; {SECRET_HOWTO}'
  elif len(secret)<SECRET_MIN:
   problem=(
    f'KGEN_SECRET_FILE={path!r} holds {len(secret)} characters: a run secret needs at least '
    f'{SECRET_MIN}; {SECRET_HOWTO}'
   )
  else:
   cfg.secret=secret
 if problem:
  cfg.secret_problem=problem
  cfg.problems.append(problem)


def secret_mode_problem(path,mode,env,cfg):



 if(env.get('KGEN_KIND')or'').strip()or not mode&0o066:
  return''
 fix=f'run: chmod 600 {shlex.quote(path)}'
 what=f'KGEN_SECRET_FILE={path} (mode {stat.S_IMODE(mode):04o})'
 if mode&0o026:
  who='any user of this host'if mode&0o006 else'its group'
  return f'{what} can be read or changed by {who}, who could then join, fail or stop the run: {fix}'
 cfg.notes.append(f'{what} can be read by its group, whose users could join, fail or stop the run: {fix}')
 return''


def create_secret_line(name,namespace,run):

 ns=f' -n {shlex.quote(namespace)}'if namespace else''
 labels=' '.join(
  shlex.quote(f'{k}={v}')
  for k,v in(('app.kubernetes.io/instance',run),('app.kubernetes.io/managed-by','kgen'))
 )
 return(
  f'kubectl create secret generic {name}{ns} --from-literal=secret="$(python3 -c '
  f"'import secrets; print(secrets.token_hex(32))')\" && kubectl label secret {name}{ns} {labels}"
 )


def load_config(env,with_rank=True):


 cfg=Config()
 env=slurm_environment(env,cfg)
 p=cfg.problems
 cfg.nnodes=_number(env,'NNODES',p,int,lo=1,fix='set NNODES to the number of nodes (pods), e.g. NNODES=4')
 cfg.nproc=_number(
  env,
  'NPROC_PER_NODE',
  p,
  int,
  lo=1,
  fix='set NPROC_PER_NODE to the processes per node (GPUs per node; CPU jobs: e.g. 1)',
 )
 addr=_raw(env,'MASTER_ADDR')
 if addr is None:
  p.append("MASTER_ADDR is not set: set it to node 0's address, e.g. <name>-0.<service> or an IP")
 elif'://'in addr or any(c.isspace()for c in addr)or(addr.count(':')==1):
  p.append(
   f'MASTER_ADDR={addr!r} is not a bare host name or IP: give the host only '
   f'(the port goes in MASTER_PORT), e.g. MASTER_ADDR=job-0.job'
  )
 else:
  cfg.master_addr=addr
 cfg.master_port=_number(
  env,
  'MASTER_PORT',
  p,
  int,
  lo=1,
  hi=65535,
  fix="set MASTER_PORT to node 0's rendezvous port, e.g. 29500",
 )
 default_live=cfg.master_port+1 if cfg.master_port and cfg.master_port<65535 else None
 if default_live is None and _raw(env,'KGEN_LIVENESS_PORT')is None and cfg.master_port is None:
  default_live=0
 cfg.liveness_port=_number(
  env,
  'KGEN_LIVENESS_PORT',
  p,
  int,
  default=default_live,
  lo=1,
  hi=65535,
  fix='set KGEN_LIVENESS_PORT to a free TCP port on node 0 (default MASTER_PORT+1)',
 )
 if cfg.liveness_port is not None and cfg.liveness_port==cfg.master_port:
  p.append(
   f'KGEN_LIVENESS_PORT={cfg.liveness_port} equals MASTER_PORT: the liveness channel '
   f'needs its own port, e.g. MASTER_PORT+1'
  )
 bind=_raw(env,'KGEN_LIVENESS_BIND')
 if bind is not None:
  items=[b.strip()for b in bind.split(',')if b.strip()]
  if items==['*']:
   cfg.liveness_bind=EVERY_INTERFACE
  elif items and all(is_ip(b)for b in items):
   cfg.liveness_bind=items
  else:
   p.append(
    f"KGEN_LIVENESS_BIND={bind!r} is not '*' or IP addresses: set it to the address(es) of node 0 that "
    f'the other nodes reach it at (comma-separated), or * for every interface'
   )
 cfg.job_name=(env.get('KGEN_JOB_NAME')or'').strip()
 cfg.run_id=(env.get('KGEN_RUN_ID')or'').strip()
 cfg.restart_attempt=(env.get('KGEN_RESTART_ATTEMPT')or'').strip()
 kind=(env.get('KGEN_KIND')or'').strip()
 if kind not in('','job','statefulset','jobset'):
  p.append(f"KGEN_KIND={kind!r} is not 'job', 'statefulset' or 'jobset': re-render with kgen render")
 cfg.kind=kind
 d=DEFAULTS
 cfg.master_wait=_number(
  env,
  'KGEN_MASTER_WAIT_TIMEOUT',
  p,
  float,
  default=d['KGEN_MASTER_WAIT_TIMEOUT'],
  lo=1,
  fix='seconds a node waits for node 0 (values timeouts.masterWait), e.g. 600',
 )
 cfg.rdzv_timeout=_number(
  env,
  'KGEN_RDZV_TIMEOUT',
  p,
  int,
  default=d['KGEN_RDZV_TIMEOUT'],
  lo=1,
  fix='whole seconds node 0 waits for all nodes (values timeouts.rendezvous), e.g. 300',
 )
 cfg.hb_interval=_number(
  env,
  'KGEN_HEARTBEAT_INTERVAL',
  p,
  float,
  default=d['KGEN_HEARTBEAT_INTERVAL'],
  lo=0.05,
  hi=60,
  fix='seconds between heartbeats (values timeouts.heartbeatInterval), e.g. 1',
 )
 cfg.hb_timeout=_number(
  env,
  'KGEN_HEARTBEAT_TIMEOUT',
  p,
  float,
  default=d['KGEN_HEARTBEAT_TIMEOUT'],
  lo=0.2,
  hi=3600,
  fix='seconds of silence after which a peer is lost (values timeouts.heartbeat), e.g. 5',
 )
 if cfg.hb_interval and cfg.hb_timeout and cfg.hb_timeout<2*cfg.hb_interval:
  p.append(
   f'KGEN_HEARTBEAT_TIMEOUT={cfg.hb_timeout:g} is less than twice '
   f'KGEN_HEARTBEAT_INTERVAL={cfg.hb_interval:g}: one late heartbeat would stop the job; '
   f'use at least 3 x the interval (defaults 5 and 1)'
  )
 cfg.max_restarts=_number(
  env,
  'KGEN_MAX_RESTARTS',
  p,
  int,
  default=d['KGEN_MAX_RESTARTS'],
  lo=0,
  fix='torchrun restarts (values maxRestarts); kgen supports 0',
 )
 if cfg.max_restarts:
  p.append(
   f'KGEN_MAX_RESTARTS={cfg.max_restarts}: in-place torchrun restarts are not supported '
   f"(with static rendezvous, torch 2.13's restarted workers read stale peer addresses and "
   f"hang); set maxRestarts: 0 and let the Job's backoffLimit restart the whole group"
  )
 cfg.max_reformations=_number(
  env,
  'KGEN_MAX_REFORMATIONS',
  p,
  int,
  default=d['KGEN_MAX_REFORMATIONS'],
  lo=0,
  fix='how often the group may re-form after a lost node (values reform.maxReformations; 0 = off), e.g. 10',
 )
 cfg.replacement_timeout=_number(
  env,
  'KGEN_REPLACEMENT_TIMEOUT',
  p,
  float,
  default=d['KGEN_REPLACEMENT_TIMEOUT'],
  lo=1,
  fix="seconds to wait for a lost node's replacement (values reform.replacementTimeout), e.g. 300",
 )
 ose=(env.get('KGEN_ON_SCRIPT_ERROR')or d['KGEN_ON_SCRIPT_ERROR']).strip()
 if ose not in ON_SCRIPT_ERROR:
  p.append(
   f"KGEN_ON_SCRIPT_ERROR={ose!r} is not 'fail' or 'reform': set values reform.onScriptError to "
   f"fail (default: a training script's own error fails the run) or reform"
  )
 cfg.on_script_error=ose
 cfg.hang_timeout=HANG.configure(env,p)
 cfg.health_gate=HEALTH.configure(env,p)
 if cfg.nnodes is not None and cfg.nnodes>1:
  read_secret(env,cfg)
 if with_rank:
  derive_rank(env,cfg.nnodes,cfg)
  if cfg.slurm is not None and cfg.node_rank is not None:
   cfg.rank_source=f'SLURM_NODEID={cfg.node_rank}'
 return cfg












def set_child_subreaper():

 try:
  import ctypes

  libc=ctypes.CDLL(None,use_errno=True)
  return libc.prctl(36,1,0,0,0)==0
 except(OSError,AttributeError):
  return False


SUPERVISOR_PID='KGEN_SUPERVISOR_PID'
_PRCTL:list=[]


def _prctl():
 if not _PRCTL:
  try:
   import ctypes

   _PRCTL.append(ctypes.CDLL(None,use_errno=True).prctl)
  except(OSError,AttributeError):
   _PRCTL.append(None)
 return _PRCTL[0]


def die_with_parent(sig,parent=None):



 prctl=_prctl()
 ok=prctl is not None and prctl(1,int(sig),0,0,0)==0
 if parent is not None and os.getppid()!=parent:
  os.kill(os.getpid(),sig)
 return ok


def _torchrun_dies_with_us():
 prctl=_PRCTL[0]if _PRCTL else None
 if prctl is not None:
  prctl(1,int(signal.SIGTERM),0,0,0)


_PROC_OURS:bool|None=None


def proc_is_ours():


 global _PROC_OURS
 if _PROC_OURS is None:
  try:
   _PROC_OURS=os.readlink('/proc/self')==str(os.getpid())
  except OSError:
   _PROC_OURS=False
  if not _PROC_OURS:
   log("/proc is not this PID namespace's: stopping torch by process group only")
 return _PROC_OURS


def descendants(root=None):

 if not proc_is_ours():
  return[]
 root=os.getpid()if root is None else root
 children:dict[int,list[int]]={}
 for name in os.listdir('/proc'):
  if not name.isdigit():
   continue
  try:
   with open(f'/proc/{name}/stat','rb')as fh:
    stat=fh.read().decode('ascii','replace')
   fields=stat.rsplit(')',1)[1].split()
   state,ppid=fields[0],int(fields[1])
  except(OSError,IndexError,ValueError):
   continue
  if state in('Z','X'):
   continue
  children.setdefault(ppid,[]).append(int(name))
 out,todo=[],[root]
 while todo:
  for child in children.get(todo.pop(),[]):
   out.append(child)
   todo.append(child)
 return out


def signal_tree(sig,extra_pgid=None):
 pids=descendants()
 grouped:set[int]=set()
 if extra_pgid:
  try:
   os.killpg(extra_pgid,sig)
   grouped={p for p in pids if _pgid(p)==extra_pgid}
  except OSError:
   pass
 for pid in pids:
  if pid in grouped:
   continue
  try:
   os.kill(pid,sig)
  except OSError:
   pass
 return len(pids)


def _pgid(pid):
 try:
  return os.getpgid(pid)
 except OSError:
  return None


class Running:



 child:Child|None=None
 link:Hub|Spoke|None=None


class Child:




 def __init__(
  self,
  argv,
  env=None,
  log_dir='',
  base_rank=0,
  proc=None,
 ):

  pipe=subprocess.PIPE if log_dir else None
  _prctl()
  self.proc=proc or subprocess.Popen(
   argv,start_new_session=True,env=env,stdout=pipe,stderr=pipe,preexec_fn=_torchrun_dies_with_us
  )
  self.pid=self.proc.pid
  self.rc:int|None=None
  self.pump=Pump(self.proc,log_dir,base_rank)if log_dir else None
  self._failure:dict|None=None
  self.termed=False
  Running.child=self

 def reap(self):
  while True:
   try:
    pid,status=os.waitpid(-1,os.WNOHANG)
   except ChildProcessError:
    return
   if pid==0:
    return
   if pid==self.pid:
    code=os.waitstatus_to_exitcode(status)
    self.rc=128-code if code<0 else code
    self.proc.returncode=self.rc

 def failure(self):

  if self._failure is None and self.rc and self.pump is not None:
   self.pump.drained.wait(FAILURE_WAIT)
   self._failure=self.pump.failure()or{}
   if self._failure:
    log(f'worker failure: {failure_text(self._failure)}')
    emit(sys.stderr,f'{FAILURE_MARK}{json.dumps(self._failure, sort_keys=True)}\n')
  return self._failure or None

 def kill_tree(self,grace,first=signal.SIGTERM,sigs=None):


  try:
   self._kill_tree(grace,first,sigs)
  finally:
   if self.pump is not None:
    self.pump.finish()

 def _kill_tree(self,grace,first,sigs):
  if first==signal.SIGTERM and self.termed:
   sent=len(descendants())
  else:
   sent=signal_tree(first,self.pid if self.rc is None else None)
  if sent==0 and(proc_is_ours()or self.rc is not None):
   return
  deadline=time.monotonic()+grace
  while time.monotonic()<deadline:
   self.reap()
   if not descendants()and(proc_is_ours()or self.rc is not None):
    return
   if sigs is not None and sigs.pending:
    log(f'received {signal.Signals(sigs.pending.pop(0)).name} again: killing the local process tree now')
    break
   time.sleep(0.05)
  left=signal_tree(signal.SIGKILL,self.pid if self.rc is None else None)
  if left:
   log(f'{left} process(es) did not stop within {grace:g}s of SIGTERM: SIGKILLed')
  deadline=time.monotonic()+5
  while time.monotonic()<deadline and descendants():
   self.reap()
   time.sleep(0.05)
  self.reap()

















FAILURE_MARK='kgen-entrypoint: worker failure: '
FAILURE_WAIT=1.0
PARTIAL_HOLD=1.0
LINE_CAP=65536
_RANK_TAG=re.compile(r'^\[rank\d+\]:\s?')
_FRAME=re.compile(r'^\s+File "(.*)", line (\d+)')
_EXC=re.compile(r'^([A-Za-z_][\w.]*)(?::\s?(.*))?$')
_INTERPRETER=re.compile(r'^/\S*python[\d.]*: ')
_PEER=re.compile(
 r'closed by peer|reset by peer|remote worker|broken pipe|timed out|timeout|DistNetworkError|DistStoreError|'
 r'communicator was aborted|connection refused|NCCL error',
 re.I,
)
_SUMMARY_RANK=re.compile(r'^\s*rank\s*: (\d+) \(local_rank: (\d+)\)')
_SUMMARY_EXIT=re.compile(r'^\s*exitcode\s*: (-?\d+)')


class ErrorScan:


 def __init__(self):
  self.tb=False
  self.frame=''
  self.error:tuple[str,str,str,float]|None=None
  self.last=''

 def feed(self,line):
  line=_RANK_TAG.sub('',line.rstrip())
  if not line.strip():
   return
  if line.startswith(('During handling of','The above exception')):
   return
  if line.startswith('Traceback (most recent call last):'):
   self.tb,self.frame=True,''
   return
  frame=_FRAME.match(line)
  if frame and(self.tb or line.startswith('  File ')):
   self.tb,self.frame=True,f'{frame.group(1)}:{frame.group(2)}'
   return
  if self.tb:
   if line[:1]in' \t':
    return
   self.tb=False
   exc=_EXC.match(line)
   if exc:
    self.error=(exc.group(1),(exc.group(2)or'').strip(),self.frame,time.time())
    return
  self.last=_INTERPRETER.sub('',line)


def _error_file(path):

 try:
  with open(path)as fh:
   data=json.load(fh)
  when=os.stat(path).st_mtime
 except(OSError,ValueError):
  return None
 msg=data.get('message')if isinstance(data,dict)else None
 if isinstance(msg,dict):
  text,stack=str(msg.get('message')or''),str((msg.get('extraInfo')or{}).get('py_callstack')or'')
 else:
  text,stack=str(msg or''),''
 kind,_,message=text.partition(': ')
 frames=[m for m in(_FRAME.match(ln)for ln in stack.splitlines())if m]
 where=f'{frames[-1].group(1)}:{frames[-1].group(2)}'if frames else''
 return kind,message,where,when


def failure_text(rec):
 what=': '.join(x for x in(rec.get('error'),rec.get('message'))if x)or f"exit {rec.get('exit')}"
 return f"rank {rec.get('rank')} (local rank {rec.get('local_rank')}): {what}"+(
  f" ({rec['where']})"if rec.get('where')else''
 )


class Pump(threading.Thread):



 def __init__(self,proc,log_dir,base_rank):
  super().__init__(name='kgen-pump',daemon=True)
  self.log_dir,self.base_rank=log_dir,base_rank
  self.streams:dict[int,list]={}
  for pipe,target in((proc.stdout,sys.stdout),(proc.stderr,sys.stderr)):
   if pipe is not None:
    fd=pipe.fileno()
    os.set_blocking(fd,False)
    self.streams[fd]=[target,'',b'',0.0,None,True]
  self.agent=ErrorScan()
  self.files:dict[str,int]={}
  self.scans:dict[int,ErrorScan]={}
  self.exits:dict[int,int]={}
  self._summary_rank:int|None=None
  self.stopping=threading.Event()
  self.drained=threading.Event()
  self.start()

 def _write(self,fd,data,final=False):
  st=self.streams[fd]
  *lines,rest=(st[2]+data).split(b'\n')
  now=time.monotonic()
  if rest and(lines or not st[2]):
   st[3]=now
  if rest and(final or len(rest)>LINE_CAP or now-st[3]>=PARTIAL_HOLD):
   lines.append(rest)
   rest=b''
  st[2]=rest
  out=[]
  for raw in lines:
   text=raw.decode('utf-8','replace').rstrip('\r')
   if'\r'in text:
    text=next((seg for seg in reversed(text.split('\r'))if seg),'')
   if st[1]:
    text=_RANK_TAG.sub('',text)
    out.append((st[1]+text).rstrip(' ')+'\n')
   else:
    out.append(text+'\n')
   if st[1]:
    HANG.saw(st[1])
   if st[4]is not None:
    st[4].feed(text)
   elif st[0]is sys.stderr:
    self._summary(text)
  if out:
   emit(st[0],''.join(out))

 def _summary(self,line):
  m=_SUMMARY_RANK.match(line)
  if m:
   self._summary_rank=int(m.group(2))
   return
  m=_SUMMARY_EXIT.match(line)
  if m and self._summary_rank is not None:
   self.exits[self._summary_rank]=int(m.group(1))
   self._summary_rank=None

 def _discover(self):
  for root,_,names in os.walk(self.log_dir):
   for name in names:
    path=os.path.join(root,name)
    if name not in('stdout.log','stderr.log')or path in self.files:
     continue
    try:
     local=int(os.path.basename(root))
     fd=os.open(path,os.O_RDONLY)
    except(ValueError,OSError):
     continue
    self.files[path]=fd
    err=name=='stderr.log'
    scan=self.scans.setdefault(local,ErrorScan())if err else None
    self.streams[fd]=[
     sys.stderr if err else sys.stdout,
     f'[rank {self.base_rank + local}] ',
     b'',
     0.0,
     scan,
     False,
    ]

 def _read_files(self,final=False):
  for fd in list(self.files.values()):
   for _ in range(64):
    try:
     data=os.read(fd,65536)
    except OSError:
     data=b''
    if data:
     self._write(fd,data)
    if len(data)<65536:
     break
   if final or self.streams[fd][2]:
    self._write(fd,b'',final)

 def run(self):
  sel=selectors.DefaultSelector()
  for fd in[fd for fd,st in self.streams.items()if st[5]]:
   sel.register(fd,selectors.EVENT_READ)
  open_pipes=len(sel.get_map())
  next_scan=0.0
  try:
   while True:
    for key,_ in sel.select(0.1)if open_pipes else[]:
     try:
      data=os.read(key.fd,65536)
     except BlockingIOError:
      continue
     except OSError:
      data=b''
     if data:
      self._write(key.fd,data)
     else:
      self._write(key.fd,b'',final=True)
      sel.unregister(key.fd)
      open_pipes-=1
    if not open_pipes:
     time.sleep(0.1)
    if time.monotonic()>=next_scan and len(self.files)<2*4096:
     self._discover()
     next_scan=time.monotonic()+0.5
    self._read_files()
    for fd,st in self.streams.items():
     if st[5]and st[2]:
      self._write(fd,b'')
    if not open_pipes and not self.drained.is_set():
     self._discover()
     self._read_files(final=True)
     self.drained.set()
    if self.stopping.is_set():
     break
   self._discover()
   self._read_files(final=True)
  finally:
   self.drained.set()
   sel.close()
   for fd in self.files.values():
    try:
     os.close(fd)
    except OSError:
     pass
   import shutil

   shutil.rmtree(self.log_dir,ignore_errors=True)

 def finish(self):

  self.stopping.set()
  self.join(5.0)

 def failure(self):


  found=[]
  locals_=set(self.scans)|set(self.exits)
  for local in sorted(locals_):
   scan=self.scans.get(local)or ErrorScan()
   code=self.exits.get(local)
   paths=[p for p in self.files if p.endswith(f'{os.sep}{local}{os.sep}stderr.log')]
   recorded=_error_file(os.path.join(os.path.dirname(paths[0]),'error.json'))if paths else None
   err,source=(recorded,'error file')if recorded else(scan.error,'traceback')
   if err is None and code in(None,0):
    continue
   rec={'rank':self.base_rank+local,'local_rank':local,'exit':code,'source':source}
   if err is not None:
    rec.update(error=err[0],message=err[1][:400],where=err[2],time=_utc_stamp(err[3]))
    rec['peer']=bool(_PEER.search(f'{err[0]}: {err[1]}'))
   elif code is not None and code<0:
    said=f' (its last line: {scan.last[:300]})'if scan.last and code!=-signal.SIGTERM else''
    rec.update(error='',message=f'killed by {_signal_name(-code)}{said}',where='',source='exit status')
    rec['peer']=code==-signal.SIGTERM
   else:
    rec.update(
     error='',message=scan.last[:400],where='',source='last line'if scan.last else'exit status'
    )
    rec['peer']=bool(_PEER.search(scan.last))
   found.append(rec)
  if not found:
   return None
  if all(r['source']=='exit status'and r['exit']==-signal.SIGTERM for r in found):
   for r in found:
    r['peer']=False
  found.sort(key=lambda r:(r['peer'],r.get('time')or'9',r['rank']))
  first=dict(found[0])
  same=(first.get('error'),first.get('message'))
  first['others']=[
   dict({k:r[k]for k in('rank','exit','error','peer')if r.get(k)is not None},
     **({'same':True}if(r.get('error'),r.get('message'))==same and not r['peer']else{}))
   for r in found[1:16]
  ]
  return first


def _signal_name(num):
 try:
  return signal.Signals(num).name
 except ValueError:
  return f'signal {num}'
























MSG_CHALLENGE='challenge'
MSG_AUTH='auth'
MSG_DENIED='denied'


def _mac(key,text):
 return hmac.new(key,text.encode()if isinstance(text,str)else text,'sha256').hexdigest()


def membership_proof(secret,ns,nc):

 return _mac(secret,f'kgen/{PROTOCOL} auth {ns} {nc}')


def new_nonce():
 return secrets.token_hex(16)


class ProtocolError(Exception):
 """A line that does not belong on this connection: too long, not kgen's protocol, or a MAC that
    does not verify (an injected, replayed, reordered or corrupted message)."""


class Session:



 def __init__(self,secret,ns,nc,side):
  self.key=bytes.fromhex(_mac(secret,f'kgen/{PROTOCOL} session {ns} {nc}'))
  self.tx_dir,self.rx_dir=('c','s')if side=='client'else('s','c')
  self.tx_seq=self.rx_seq=0

 def seal(self,msg):
  body=_encode(msg)
  tag=_mac(self.key,f'{self.tx_dir} {self.tx_seq} {body}')
  self.tx_seq+=1
  return f'{tag} {body}\n'.encode()

 def open(self,line):
  tag,_,body=line.partition(b' ')
  expected=_mac(self.key,f'{self.rx_dir} {self.rx_seq} '.encode()+body).encode()
  if not hmac.compare_digest(tag,expected):
   raise ProtocolError('a message failed verification (injected, replayed, reordered or corrupted)')
  self.rx_seq+=1
  return _decode(body,'an authenticated line is not a message of the protocol')


def _encode(msg):
 return json.dumps(msg,separators=(',',':'))


def _too_deep(body):

 if body.count(b'[')+body.count(b'{')<=MAX_DEPTH:
  return False
 depth,in_str,esc=0,False,False
 for c in body:
  if in_str:
   esc,in_str=(False,True)if esc else(c==0x5C,c!=0x22)
  elif c==0x22:
   in_str=True
  elif c in b'[{':
   depth+=1
   if depth>MAX_DEPTH:
    return True
  elif c in b']}':
   depth-=1
 return False


def _decode(body,problem):




 try:
  msg=None if _too_deep(body)else json.loads(body)
 except(ValueError,RecursionError):
  msg=None
 t=msg.get('t')if isinstance(msg,dict)else None
 fields=FIELDS.get(t)if isinstance(t,str)else None
 if fields is None or msg is None:
  raise ProtocolError(problem)
 out={'t':t}
 for name,(check,default)in fields.items():
  if name not in msg and default is not REQUIRED:
   out[name]=default
  elif not check(msg.get(name,REQUIRED)):
   raise ProtocolError(f'{problem} (field {name!r} of {t!r})')
  else:
   out[name]=msg[name]
 return out


def plain_line(msg):
 return(_encode(msg)+'\n').encode()


def parse_plain(line):
 return _decode(line,"sent something that is not kgen's protocol")


def show_addr(addr):
 if isinstance(addr,tuple)and len(addr)>=2:
  host,port=addr[0],addr[1]
  return f'[{host}]:{port}'if':'in str(host)else f'{host}:{port}'
 return str(addr or'?')


class Conn:
 def __init__(self,sock,addr=None):
  sock.setblocking(False)
  try:
   sock.setsockopt(socket.IPPROTO_TCP,socket.TCP_NODELAY,1)
  except OSError:
   pass
  self.sock,self.addr=sock,addr
  self.inbuf=b''
  self.outbuf=b''
  self.last_rx=self.last_tx=time.monotonic()
  self.closed=False
  self.session:Session|None=None
  self.nonce=''
  self.limit=PREAUTH_LINE_MAX
  self.rank:int|None=None
  self.host=''
  self.done=False
  self.since=time.monotonic()
  self.sel:selectors.BaseSelector|None=None

 def register(self,sel):
  sel.register(self.sock,selectors.EVENT_READ,('conn',self))
  self.sel=sel

 def send(self,msg):
  if self.closed:
   return
  self.outbuf+=self.session.seal(msg)if self.session is not None else plain_line(msg)
  self.last_tx=time.monotonic()
  self.flush()

 def flush(self,block_for=0.0):
  deadline=time.monotonic()+block_for
  while self.outbuf and not self.closed:
   try:
    n=self.sock.send(self.outbuf)
    self.outbuf=self.outbuf[n:]
   except(BlockingIOError,InterruptedError):
    if time.monotonic()>=deadline:
     return
    time.sleep(0.01)
   except OSError:
    self.close()
    return

 def fill(self):

  try:
   data=self.sock.recv(65536)
  except(BlockingIOError,InterruptedError):
   return True
  except OSError:
   return False
  if not data:
   return False
  self.last_rx=time.monotonic()
  self.inbuf+=data
  return True

 def pop(self):


  end=self.inbuf.find(b'\n')
  if end<0 or end>self.limit:
   if len(self.inbuf)>self.limit:
    raise ProtocolError(f'sent more than {self.limit} bytes without a line break')
   return None
  line,self.inbuf=self.inbuf[:end],self.inbuf[end+1:]
  return self.session.open(line)if self.session is not None else parse_plain(line)

 def close(self):


  if self.sel is not None:
   try:
    self.sel.unregister(self.sock)
   except(KeyError,ValueError,OSError):
    pass
   self.sel=None
  if not self.closed:
   self.closed=True
   try:
    self.sock.close()
   except OSError:
    pass


def resolve(host,port):
 infos=socket.getaddrinfo(host,port,type=socket.SOCK_STREAM)
 return[info[4]for info in infos]


def is_ip(text):
 for family in(socket.AF_INET,socket.AF_INET6):
  try:
   socket.inet_pton(family,text)
   return True
  except(OSError,ValueError):
   pass
 return False


def is_local(addr):

 try:
  with socket.socket(socket.AF_INET6 if':'in addr else socket.AF_INET,socket.SOCK_STREAM)as sock:
   sock.bind((addr,0))
  return True
 except OSError:
  return False


EVERY_INTERFACE=['0.0.0.0','::']


def bind_addresses(cfg):






 if cfg.liveness_bind:
  every=cfg.liveness_bind==EVERY_INTERFACE
  return cfg.liveness_bind,'every interface: KGEN_LIVENESS_BIND=*'if every else'KGEN_LIVENESS_BIND'
 if cfg.kind:
  return EVERY_INTERFACE,"every interface of the pod; the run's NetworkPolicy admits only its own pods"
 try:
  named=sorted({a[0]for a in resolve(cfg.master_addr,0)})
 except(OSError,UnicodeError):
  named=[]
 local=[a for a in named if is_local(a)]
 loopback=all(a.startswith('127.')or a=='::1'for a in local)
 if local and(not loopback or is_ip(cfg.master_addr)or cfg.master_addr=='localhost'):
  return local,f'where MASTER_ADDR={cfg.master_addr} reaches this host; KGEN_LIVENESS_BIND=* widens it'
 said=f"names {', '.join(local)} here only"if local else f"is {', '.join(named) or 'unresolved'} here"
 return EVERY_INTERFACE,(
  f'every interface: MASTER_ADDR={cfg.master_addr} {said}, not an address the other nodes reach this host '
  f'at; set KGEN_LIVENESS_BIND to that address'
 )


class Rejected(Exception):
 def __init__(self,reason,code):
  super().__init__(reason)
  self.code=code


class Denied(Exception):
 """Node 0 (or whatever answers at its address) refused this process's membership proof."""


def _read_line(sock,buf,deadline,limit):
 while b'\n'not in buf:
  left=deadline-time.monotonic()
  if left<=0:
   raise TimeoutError('no answer')
  if len(buf)>limit:
   raise ProtocolError(f'the answer exceeds {limit} bytes without a line break')
  sock.settimeout(left)
  data=sock.recv(4096)
  if not data:
   raise ConnectionResetError('closed during the handshake')
  buf+=data
 line,rest=buf.split(b'\n',1)
 return line,rest


def handshake(cfg,sock,first):




 if cfg.secret is None:
  raise Denied('no run secret on this host (KGEN_SECRET_FILE)')
 deadline=time.monotonic()+HANDSHAKE_TIMEOUT
 line,rest=_read_line(sock,b'',deadline,PREAUTH_LINE_MAX)
 challenge=parse_plain(line)
 if challenge['t']!=MSG_CHALLENGE:
  raise ProtocolError('the process on that port is not a kgen node 0 (no challenge)')
 if challenge['v']!=PROTOCOL:
  raise ProtocolError(f"node 0 speaks liveness protocol {challenge['v']}, this node {PROTOCOL}")
 ns,nc=challenge['n'],new_nonce()
 session=Session(cfg.secret,ns,nc,'client')
 auth={'t':MSG_AUTH,'v':PROTOCOL,'n':nc,'mac':membership_proof(cfg.secret,ns,nc)}
 sock.settimeout(max(0.1,deadline-time.monotonic()))
 sock.sendall(plain_line(auth)+session.seal(first))
 line,rest=_read_line(sock,rest,deadline,LINE_MAX)
 if line.startswith(b'{'):
  plain=parse_plain(line)
  if plain['t']==MSG_DENIED:
   raise Denied(shown(plain['reason']))
  raise ProtocolError("node 0's answer is not authenticated")
 return session,session.open(line),rest


def open_session(cfg,first,timeout,host=None,addrs=None):



 addrs=addrs or resolve(host or cfg.master_addr,cfg.liveness_port)
 last:Exception=OSError('no address')
 for addr in addrs:
  family=socket.AF_INET6 if len(addr)==4 else socket.AF_INET
  sock=socket.socket(family,socket.SOCK_STREAM)
  try:
   sock.settimeout(timeout)
   sock.connect(addr)
   session,answer,rest=handshake(cfg,sock,first)
  except Denied:
   sock.close()
   raise
  except(OSError,ProtocolError)as exc:
   sock.close()
   last=exc
   continue
  return sock,session,answer,rest
 raise last


def connect_once(
 cfg,hello,timeout,addrs=None
):


 sock,session,answer,rest=open_session(cfg,hello,timeout,addrs=addrs)
 if answer['t']==MSG_WELCOME:
  return sock,session,rest
 sock.close()
 if answer['t']!=MSG_REJECT:
  raise ProtocolError(f"node 0 answered a hello with {answer['t']!r}")
 raise Rejected(shown(answer['reason'],1000),answer['code'])


class Signals:


 def __init__(self):
  self.rfd,self.wfd=os.pipe()
  os.set_blocking(self.rfd,False)
  os.set_blocking(self.wfd,False)
  self.pending:list[int]=[]
  signal.set_wakeup_fd(self.wfd,warn_on_full_buffer=False)
  for sig in(signal.SIGTERM,signal.SIGINT,signal.SIGHUP,signal.SIGQUIT):
   signal.signal(sig,self._on)
  signal.signal(signal.SIGCHLD,lambda*_:None)

 def _on(self,signum,_frame):
  self.pending.append(signum)

 def drain(self):
  try:
   while os.read(self.rfd,512):
    pass
  except OSError:
   pass

 def sleep(self,seconds):

  if seconds>0 and not self.pending:
   try:
    sel=selectors.DefaultSelector()
    sel.register(self.rfd,selectors.EVENT_READ)
    sel.select(seconds)
    sel.close()
   except(OSError,ValueError):
    time.sleep(min(seconds,0.1))
  self.drain()

















MSG_HELLO='hello'
MSG_WELCOME='welcome'
MSG_REJECT='reject'
MSG_PROBE='probe'
MSG_STATUS='status'
MSG_HB='hb'
MSG_START='start'
MSG_ABORT='abort'
MSG_END='end'
MSG_DONE='done'
MSG_FAIL='fail'
MSG_LEAVE='leave'
MSG_STOP='stop'
MSG_STOPPING='stopping'



REQUIRED=object()
_BIG=(1<<31)-1
_int=lambda lo,hi=_BIG:lambda v:type(v)is int and lo<=v<=hi
_hex=lambda n:lambda v:type(v)is str and len(v)==n and not v.strip('0123456789abcdef')
_TEXT=lambda v:type(v)is str and len(v)<=TEXT_MAX and v.isprintable()
_VERSION,_RANK,_COUNT,_GEN,_CODE=_int(-_BIG),_int(0),_int(1),_int(-1),_int(1,255)
_RANKS=lambda v:type(v)is list and len(v)<=1<<16 and all(map(_RANK,v))
FIELDS:dict[str,dict]={
 MSG_CHALLENGE:{'v':(_VERSION,REQUIRED),'n':(_hex(32),REQUIRED)},
 MSG_AUTH:{'v':(_VERSION,REQUIRED),'n':(_hex(32),REQUIRED),'mac':(_hex(64),REQUIRED)},
 MSG_DENIED:{'reason':(_TEXT,'refused')},
 MSG_HELLO:{
  'v':(_VERSION,REQUIRED),
  'rank':(_RANK,REQUIRED),
  'id':(_TEXT,REQUIRED),
  'nnodes':(_COUNT,REQUIRED),
  'nproc':(_COUNT,REQUIRED),
  'host':(_TEXT,'?'),
  'last':(_GEN,-1),
 },
 MSG_WELCOME:{'v':(_VERSION,REQUIRED),'hb':(lambda v:type(v)in(int,float)and 0<v<=3600,1.0)},
 MSG_REJECT:{'reason':(_TEXT,REQUIRED),'code':(lambda v:type(v)is int and v in(0,2,76),REQUIRED)},
 MSG_PROBE:{},
 MSG_STATUS:{
  'joined':(_RANKS,REQUIRED),
  'nnodes':(_COUNT,REQUIRED),
  'id':(_TEXT,REQUIRED),
  'gen':(_GEN,-1),
  'state':(_TEXT,'?'),
 },
 MSG_HB:{},
 MSG_START:{'gen':(_RANK,REQUIRED)},
 MSG_ABORT:{'gen':(_GEN,-1),'reason':(_TEXT,'unknown')},
 MSG_END:{'code':(_CODE,REQUIRED),'reason':(_TEXT,'?'),'blame':(lambda b:b is None or _RANK(b),None)},
 MSG_DONE:{},
 MSG_FAIL:{'rc':(_CODE,REQUIRED),'internal':(_TEXT,'')},
 MSG_LEAVE:{'reason':(_TEXT,'unknown')},
 MSG_STOP:{'host':(_TEXT,'?')},
 MSG_STOPPING:{'nodes':(_RANKS,REQUIRED)},
}

REFORM='reform'
FAIL='fail'


def decide(cfg,fault,gen):







 if fault=='internal':
  return FAIL,EXIT_RUN_FAILED,'a kgen entrypoint failed (an internal error: report it)'
 if cfg.slurm is not None:
  return slurm_decide(cfg,fault)
 if cfg.max_reformations==0:
  return FAIL,EXIT_PEER_LOST,'re-formation is off (KGEN_MAX_REFORMATIONS=0)'
 if fault=='script'and cfg.on_script_error=='fail':
  return FAIL,EXIT_RUN_FAILED,'a training script failed (KGEN_ON_SCRIPT_ERROR=fail)'
 if gen+1>cfg.max_reformations:
  return FAIL,EXIT_RUN_FAILED,f're-formation limit reached (KGEN_MAX_REFORMATIONS={cfg.max_reformations})'
 return REFORM,0,''


def check_torch():

 import importlib.util

 try:
  found=importlib.util.find_spec('torch')is not None
 except(ImportError,ValueError):
  found=False
 if not found:
  fatal(
   EXIT_CONFIG,
   f'torch is not installed for {sys.executable}: use an image with torch, or set values '
   f'`python` to the interpreter that has it',
  )


def wrong_secret(cfg,target,reason):
 fix=(
  "the Job's pods derive it from the Job's UID, so node 0 there is a pod of another Job (one deleted or "
  'replaced under the same name?)'
  if cfg.secret_from_uid
  else f'every node needs the same secret in KGEN_SECRET_FILE (here {cfg.secret_file}); on Kubernetes '
  f"every pod mounts the run's Secret: re-render and re-apply the whole run"
 )
 fatal(
  EXIT_CONFIG,f"wrong secret: node 0 at {target} refused this node's proof of the run secret ({reason}): {fix}"
 )


def stopped_by_user(host):
 return Stop(EXIT_STOPPED,f'stopped by user on {host}')


def tell_node0_stop(cfg,host,budget):




 deadline=time.monotonic()+budget
 backoff=BACKOFF_FIRST
 why='not tried'
 denied:Denied|None=None
 while True:
  try:
   sock,_,answer,_=open_session(
    cfg,{'t':MSG_STOP,'host':host},timeout=max(0.2,min(2.0,deadline-time.monotonic()))
   )
   denied=None
  except Denied as exc:
   denied,why=exc,f'denied ({exc})'
  except socket.gaierror as exc:
   denied=None
   why=f'{cfg.master_addr!r} does not resolve ({exc.strerror or exc})'
  except(OSError,ProtocolError)as exc:
   denied=None
   why=getattr(exc,'strerror',None)or str(exc)or type(exc).__name__
  else:
   sock.close()
   if answer['t']==MSG_STOPPING:
    nodes=answer['nodes']
    return True,f'node 0 is stopping the group ({len(nodes)} other node(s) connected: {nodes[:64]})'
   why=f"node 0 answered {answer['t']!r}"
  now=time.monotonic()
  if now>=deadline:
   if denied is not None:
    raise denied
   return False,why
  time.sleep(min(backoff,BACKOFF_MAX,deadline-now)*random.uniform(0.5,1.0))
  backoff*=2


def stop_unconnected(cfg):


 host=socket.gethostname()
 try:
  told,detail=tell_node0_stop(cfg,host,min(STOP_BUDGET,2.0))
 except Denied as exc:
  told,detail=False,f"node 0 refused this node's proof ({exc})"
 log(f"received SIGINT: stopped by user; node 0 {'told: ' + detail if told else 'not told: ' + detail}")
 return stopped_by_user(host)


def refused_poll(nnodes):



 return min(BACKOFF_MAX,max(0.05,(nnodes-1)/REFUSED_RATE))


def lookup_poll(nnodes):



 return min(BACKOFF_MAX,max(0.25,(nnodes-1)/LOOKUP_RATE))


def wait_for_master(cfg,sigs,last=-1):







 hello={
  't':MSG_HELLO,
  'v':PROTOCOL,
  'rank':cfg.node_rank,
  'id':cfg.rdzv_id,
  'nnodes':cfg.nnodes,
  'nproc':cfg.nproc,
  'host':printable(os.environ.get('HOSTNAME')or socket.gethostname())[:255],
  'last':last,
 }
 if last<0:
  bound,bound_name=cfg.master_wait,'KGEN_MASTER_WAIT_TIMEOUT'
 else:
  bound,bound_name=cfg.replacement_timeout,'KGEN_REPLACEMENT_TIMEOUT'
 start=time.monotonic()
 deadline=start+bound
 next_progress=start+PROGRESS_EVERY
 backoff=BACKOFF_FIRST
 attempts=0
 state='not tried'
 denied_since:float|None=None
 denied_reason=''
 target=f'{cfg.master_addr}:{cfg.liveness_port}'
 refused:tuple[list,float]|None=None
 log(f'waiting for node 0 at {target} (liveness port; bound {bound_name}={bound:g}s)')
 while True:
  if sigs.pending:
   sig=sigs.pending.pop(0)
   name=signal.Signals(sig).name
   if sig==signal.SIGINT:
    raise stop_unconnected(cfg)
   log(f'received {name} while waiting for node 0: exiting')
   raise Stop(128+sig,f'signal {name}')
  attempts+=1
  now=time.monotonic()
  denied=False
  addrs:list|None=None
  resolved_at=now
  if refused is not None and now-refused[1]<BACKOFF_MAX:
   addrs,resolved_at=refused
  refused,unresolved=None,False
  try:
   addrs=addrs or resolve(cfg.master_addr,cfg.liveness_port)
   sock,session,rest=connect_once(cfg,hello,timeout=max(0.2,min(5.0,deadline-now)),addrs=addrs)
   log(f'node 0 reachable after {time.monotonic() - start:.1f}s ({attempts} attempt(s))')
   conn=Conn(sock)
   conn.session,conn.limit=session,LINE_MAX
   conn.inbuf=rest
   return conn
  except socket.gaierror as exc:
   state=f'DNS: {cfg.master_addr!r} does not resolve ({exc.strerror or exc})'
   unresolved=True
  except Denied as exc:


   denied,denied_reason=True,str(exc)
   denied_since=now if denied_since is None else denied_since
   state=f"{target} denied this node's proof of the run secret ({exc}): a wrong secret, or not yet node 0"
   if now-denied_since>=DENIED_BOUND:
    wrong_secret(cfg,target,f'{exc}; denials alone for {now - denied_since:.0f}s')
  except Rejected as exc:
   if exc.code==EXIT_DROPPED:
    log(f'node 0 says: {exc}')
    raise Stop(EXIT_DROPPED,f'dropped from the group ({exc})')from None
   if exc.code:
    fatal(exc.code,f'node 0 refused this node: {exc}')
   state=f'node 0 answered but is not ready for this node: {exc}'
  except ProtocolError as exc:
   state=f"{target} answered but did not prove it is this run's node 0 ({exc})"
  except(OSError,ValueError)as exc:
   reason=getattr(exc,'strerror',None)or str(exc)or type(exc).__name__
   state=f'port: {target} resolved but not accepting ({reason})'
   if isinstance(exc,ConnectionRefusedError)and addrs:
    refused=(addrs,resolved_at)
  if not denied:
   denied_since=None
  now=time.monotonic()
  if now>=deadline:
   if denied_since is not None:
    wrong_secret(
     cfg,target,f'{denied_reason}; denials alone for {now - denied_since:.0f}s, until {bound_name}'
    )
   break
  if now>=next_progress:
   log(f'still waiting for node 0 ({now - start:.0f}s of {bound:g}s): {state}')
   next_progress=now+PROGRESS_EVERY
  if refused:
   delay=refused_poll(cfg.nnodes)
  else:
   delay=lookup_poll(cfg.nnodes)if unresolved else min(backoff,BACKOFF_MAX)
  delay*=random.uniform(0.5,1.0)
  backoff*=2
  sigs.sleep(min(delay,max(0.0,deadline-now)))
 if state.startswith('DNS'):
  hint=(
   'the name never resolved: is pod 0 scheduled and running? Does the headless Service '
   'exist with publishNotReadyAddresses: true, and does the pod set subdomain/serviceName '
   'to it? (kubectl get pods,svc; kubectl describe pod <name>-0)'
  )
 else:
  hint=(
   'the name resolved but nothing answered on the liveness port: is pod 0 running the kgen '
   'entrypoint (kubectl logs <name>-0), is KGEN_LIVENESS_PORT the same on every pod, does '
   'a NetworkPolicy block it?'
  )
 what='not reachable'if last<0 else f'not back (after generation {last})'
 fatal(
  EXIT_MASTER_UNREACHABLE,
  f'node 0 {what} within {bound_name}={bound:g}s after {attempts} attempts; last: {state}; {hint}',
 )
 raise AssertionError


class StrangerLog:



 def __init__(self):
  self.window_start=time.monotonic()
  self.lines=self.suppressed=self.total=0

 def note(self,text):
  self.total+=1
  self.roll(time.monotonic())
  if self.lines<STRANGER_LOG_BURST:
   self.lines+=1
   log(text)
  else:
   self.suppressed+=1

 def roll(self,now,final=False):
  if now-self.window_start<STRANGER_LOG_WINDOW and not final:
   return
  if self.suppressed:
   log(
    f'refused {self.suppressed} more connection(s) from outside the run in the last '
    f'{now - self.window_start:.0f}s (not logged one by one; {self.total} in all)'
   )
  self.window_start,self.lines,self.suppressed=now,0,0







class Hub:



 def __init__(self,cfg,sel):
  self.cfg,self.sel=cfg,sel
  self.listeners:list[socket.socket]=[]
  self.unproven:dict[Conn,None]={}
  self.members:dict[Conn,None]={}
  self.peers:dict[int,Conn]={}
  self.lasts:dict[int,int]={}
  self.dropped:dict[int,tuple[int,str]]={}
  self.expected=set(range(1,cfg.nnodes))
  self.gen=-1
  self.state='joining'
  self.form_started=time.monotonic()
  self.why_forming=''
  self.last_beat=0.0
  self.lost:str|None=None
  self.script_fail:tuple[int,int,float,str]|None=None
  self.script_fail_peer=False
  self.stop_host:str|None=None
  self.told:set[int]=set()
  self.strangers=StrangerLog()
  self.seen_nonces:dict[str,None]={}
  Running.link=self

 def listen(self,sigs=None):



  hosts,why=bind_addresses(self.cfg)
  start=time.monotonic()
  delay=BACKOFF_FIRST
  said=False
  while True:
   errors=self._bind(hosts)
   busy=[h for h,exc in errors if getattr(exc,'errno',None)==errno.EADDRINUSE]
   if not busy or time.monotonic()-start>=LISTEN_BUSY_BOUND or(sigs is not None and sigs.pending):
    break
   if not said:
    said=True
    log(
     f'KGEN_LIVENESS_PORT={self.cfg.liveness_port} is in use on {busy[0]}: trying again for up to '
     f'{LISTEN_BUSY_BOUND:g}s (a node 0 ending on this host?)'
    )
   self.close_listeners()
   (sigs.sleep if sigs is not None else time.sleep)(min(delay,BACKOFF_MAX))
   delay*=2
  if said and not errors:
   log(f'KGEN_LIVENESS_PORT={self.cfg.liveness_port} free after {time.monotonic() - start:.1f}s')
  if not self.listeners or any(h!='::'for h,_ in errors):
   host,exc=errors[0]if errors else('?',OSError('no socket'))
   held=f', still in use after {LISTEN_BUSY_BOUND:g}s'if busy else''
   fatal(
    EXIT_CONFIG,
    f'KGEN_LIVENESS_PORT={self.cfg.liveness_port}: cannot listen on {host} ({exc}{held}): pick a free '
    f'port (values livenessPort) that differs from MASTER_PORT'
    +(''if host in('0.0.0.0','::')else', or set KGEN_LIVENESS_BIND to an address of node 0'),
   )
  return f"{', '.join(hosts)} ({why})"

 def _bind(self,hosts):
  errors:list[tuple[str,OSError]]=[]
  for host in hosts:
   family=socket.AF_INET6 if':'in host else socket.AF_INET
   try:
    sock=socket.socket(family,socket.SOCK_STREAM)
   except OSError as exc:
    errors.append((host,exc))
    continue
   try:
    sock.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)
    if family==socket.AF_INET6:
     sock.setsockopt(socket.IPPROTO_IPV6,socket.IPV6_V6ONLY,1)
    sock.bind((host,self.cfg.liveness_port))
    sock.listen(max(MAX_UNPROVEN,self.cfg.nnodes))
    sock.setblocking(False)
   except OSError as exc:
    sock.close()
    errors.append((host,exc))
    continue
   self.listeners.append(sock)
   self.sel.register(sock,selectors.EVENT_READ,('listen',sock))
  return errors

 def close_listeners(self):
  for sock in self.listeners:
   try:
    self.sel.unregister(sock)
   except(KeyError,ValueError):
    pass
   sock.close()
  self.listeners=[]


 def on_event(self,data):
  kind,obj=data
  try:
   self._accept(obj)if kind=='listen'else self.read(obj)
  except Exception as exc:
   internal_error(exc,f"handling a connection from {show_addr(getattr(obj, 'addr', None))}")
   if kind=='conn'and not obj.closed:
    self._bad(obj,f'kgen failed handling its line ({type(exc).__name__}: an internal error)')

 def read(self,conn):


  if conn.closed:
   return
  alive=conn.fill()
  while not conn.closed:
   try:
    msg=conn.pop()
   except ProtocolError as exc:
    self._bad(conn,str(exc))
    return
   if msg is None:
    break
   if conn.session is None:
    self._prove(conn,msg)
   else:
    self._message(conn,msg)
  if not alive and not conn.closed:
   if conn.session is None:
    self._stranger(conn,'closed the connection without proving membership')
   else:
    self._gone(conn,'closed its liveness connection (pod died, was deleted or its entrypoint was killed)')

 def _accept(self,listener):
  for _ in range(64):
   try:
    sock,addr=listener.accept()
   except OSError:
    return
   conn=Conn(sock,addr)
   conn.nonce=new_nonce()
   self.unproven[conn]=None
   conn.register(self.sel)
   conn.send({'t':MSG_CHALLENGE,'v':PROTOCOL,'n':conn.nonce})
   if conn.closed:
    self._stranger(conn,'reset the connection before its challenge')
    continue
   if len(self.unproven)>MAX_UNPROVEN:
    oldest=next(iter(self.unproven))
    self._stranger(oldest,f'dropped: more than {MAX_UNPROVEN} connections waited to prove membership')

 def _stranger(self,conn,what,deny=None):

  self.strangers.note(
   f'refused a connection from {show_addr(conn.addr)}: {what} (not a node of this run; not counted, '
   f'nothing changed)'
  )
  if deny is not None:
   conn.send({'t':MSG_DENIED,'reason':deny})
  self._drop(conn)

 def _prove(self,conn,msg):


  if msg['t']!=MSG_AUTH:
   return self._stranger(conn,f"sent {msg['t']!r} without proving membership")
  if msg['v']!=PROTOCOL:
   v=msg['v']
   return self._stranger(
    conn,
    f'speaks liveness protocol {v}',
    deny=f"liveness protocol {v} vs node 0's {PROTOCOL}: every node must run the same kgen entrypoint",
   )
  nc,mac=msg['n'],msg['mac']
  if not hmac.compare_digest(mac,membership_proof(self.cfg.secret or b'',conn.nonce,nc)):
   if nc in self.seen_nonces:
    what='replayed a recorded exchange (its nonce was used before)'
   else:
    what='wrong proof of the run secret (a different KGEN_SECRET_FILE?)'
   return self._stranger(conn,what,deny='wrong secret')
  self.seen_nonces[nc]=None
  if len(self.seen_nonces)>4096:
   del self.seen_nonces[next(iter(self.seen_nonces))]
  conn.session=Session(self.cfg.secret or b'',conn.nonce,nc,'server')
  conn.limit=LINE_MAX
  conn.since=time.monotonic()
  del self.unproven[conn]
  self.members[conn]=None

 def _bad(self,conn,why):
  if conn.session is None:
   self._stranger(conn,why)
  elif conn.rank is not None:
   self._gone(conn,f'sent a line that is not valid on its connection ({why}): dropped')
  else:
   log(f'dropped a connection from {show_addr(conn.addr)}: {why}')
   self._drop(conn)

 def _gone(self,conn,what):

  self._drop(conn)
  rank=conn.rank
  if rank is None or self.peers.get(rank)is not conn:
   return
  del self.peers[rank]
  self.lasts.pop(rank,None)
  if conn.done or self.state=='stopping':
   return
  if self.state=='joining':
   log(f'node {rank} {what} while the group was forming: waiting for it again')
  else:
   self.lose(rank,f'node {rank} {what}')


 def _message(self,conn,msg):
  t=msg['t']
  if conn.rank is None:
   if t==MSG_PROBE:
    conn.send(
     {
      't':MSG_STATUS,
      'joined':sorted(self.peers),
      'nnodes':self.cfg.nnodes,
      'id':self.cfg.rdzv_id,
      'gen':self.gen,
      'state':self.state,
     }
    )
    conn.flush(0.5)
    self._drop(conn)
   elif t==MSG_HELLO:
    self._hello(conn,msg)
   elif t==MSG_STOP:
    self._stop_asked(conn,msg)
    conn.send({'t':MSG_STOPPING,'nodes':sorted(self.peers)})
    conn.flush(0.5)
    self._drop(conn)
   else:
    log(f'dropped a member connection from {show_addr(conn.addr)}: it sent {t!r} before hello')
    self._drop(conn)
   return
  if t==MSG_DONE:
   conn.done=True
   log(f'node {conn.rank} finished successfully')
  elif t==MSG_FAIL and msg['internal']:
   reason=internal_reason(f'node {conn.rank}',shown(msg['internal'],400))
   log(f'node {conn.rank} says: {reason}')
   self.script_failed(conn.rank,msg['rc'],reason)
  elif t==MSG_FAIL:
   log(f"node {conn.rank}'s torchrun exited with code {msg['rc']}")
   self.script_failed(conn.rank,msg['rc'])
  elif t==MSG_LEAVE:
   self._gone(conn,f"left: {shown(msg['reason'])}")
  elif t in(MSG_PROGRESS,MSG_STACKS,MSG_STACKED):
   HANG.from_node(conn.rank,msg)
  elif t==MSG_STOP:
   conn.done=True
   self._stop_asked(conn,msg)
  elif t!=MSG_HB:
   self._bad(conn,f'sent {t!r}, which no node sends to node 0 once joined')

 def _stop_asked(self,conn,msg):
  host=shown(msg['host'])
  via=f'node {conn.rank}'if conn.rank is not None else f'kgen_entrypoint.py --stop from {show_addr(conn.addr)}'
  log(f'stop requested by user on {host} ({via})')
  if self.stop_host is None:
   self.stop_host=host

 def _reject(self,conn,msg,reason,code):
  log(f"refused node {msg['rank']} (host {shown(msg['host'])}): {reason}")
  conn.send({'t':MSG_REJECT,'reason':reason,'code':code})
  conn.flush(0.5)
  self._drop(conn)

 def _hello(self,conn,msg):
  rank,last=msg['rank'],msg['last']
  cfg=self.cfg
  if msg['id']!=cfg.rdzv_id:
   return self._reject(
    conn,
    msg,
    f"rendezvous id '{shown(msg['id'])}' differs from node 0's {cfg.rdzv_id!r} (pods of two different "
    'runs?)',
    0,
   )
  if self.state=='stopping':
   conn.send({'t':MSG_STOP,'host':self.stop_host})
   conn.flush(0.5)
   self.told.add(rank)
   self._drop(conn)
   return
  if self.state=='finishing':
   return self._reject(conn,msg,'node 0 has finished this run',0)
  if msg['nnodes']!=cfg.nnodes or msg['nproc']!=cfg.nproc:
   return self._reject(
    conn,
    msg,
    f"NNODES {msg['nnodes']} vs {cfg.nnodes} / NPROC_PER_NODE {msg['nproc']} vs {cfg.nproc} "
    f'(that node vs node 0): render every pod from the same manifest',
    EXIT_CONFIG,
   )
  if rank not in self.expected:
   return self._reject(conn,msg,f'node rank {rank} is not in 1..{cfg.nnodes - 1}',EXIT_CONFIG)
  if rank in self.dropped and 0<=last<=self.dropped[rank][0]:
   gen,why=self.dropped[rank]
   return self._reject(
    conn,
    msg,
    f'node {rank} was dropped from generation {gen} ({why}) and the group has moved on: this '
    f'process is stale; exit {EXIT_DROPPED} so that the pod is replaced',
    EXIT_DROPPED,
   )
  if rank in self.peers:
   return self._reject(
    conn,
    msg,
    f'node rank {rank} already joined from {self.peers[rank].host}: two pods derived the same node rank',
    EXIT_CONFIG,
   )
  if self.state!='joining':
   return self._reject(conn,msg,f'node 0 is training generation {self.gen}; try again',0)
  del self.members[conn]
  conn.rank,conn.host=rank,shown(msg['host'])
  self.peers[rank]=conn
  self.lasts[rank]=last
  if last<0:
   self.dropped.pop(rank,None)
  conn.send({'t':MSG_WELCOME,'v':PROTOCOL,'hb':cfg.hb_interval})
  log(
   f'node {rank} joined the liveness channel ({len(self.peers)}/{cfg.nnodes - 1} peers, host '
   f'{conn.host}, last generation {last})'
  )

 def _drop(self,conn):
  self.unproven.pop(conn,None)
  self.members.pop(conn,None)
  conn.close()

 def lose(self,rank,reason):
  if self.state=='training'and rank is not None:
   self.dropped[rank]=(self.gen,reason)
  if self.lost is None:
   self.lost=reason

 def script_failed(self,rank,rc,internal=''):

  first=self.script_fail
  if first is None or(internal and not first[3]):
   self.script_fail=(rank,rc,time.monotonic(),internal)
   self.script_fail_peer=False
  elif self.script_fail_peer and not first[3]and rank!=first[0]:


   self.script_fail=(rank,rc,first[2],internal)
   self.script_fail_peer=False

 def own_failure_was_a_peers(self):

  if self.script_fail is not None and self.script_fail[0]==0 and not self.script_fail[3]:
   self.script_fail_peer=True


 @property
 def first_formation(self):
  return self.gen<0 and all(last<0 for last in self.lasts.values())

 def complete(self):
  return set(self.peers)==self.expected

 def form_deadline_passed(self,now):

  cfg=self.cfg
  missing=sorted(self.expected-set(self.peers))
  if self.first_formation:
   if now-self.form_started<=cfg.rdzv_timeout:
    return None
   return(
    f'node rank(s) {missing} did not connect within KGEN_RDZV_TIMEOUT={cfg.rdzv_timeout}s: are '
    f'those pods scheduled and running (kubectl get pods -o wide; kubectl describe pod)?'
   )
  if now-self.form_started<=cfg.replacement_timeout:
   return None
  why=f' after {self.why_forming}'if self.why_forming else''
  return(
   f're-forming{why}: node rank(s) {missing} did not come back within KGEN_REPLACEMENT_TIMEOUT='
   f'{cfg.replacement_timeout:g}s (a frozen or partitioned pod keeps its index, so the Job '
   f'controller creates no replacement until it is evicted or exits)'
  )

 def next_generation(self):
  return max([self.gen,*self.lasts.values()])+1

 def start(self,gen):
  self.gen=gen
  self.state='training'
  self.lost=None
  self.script_fail=None
  self.script_fail_peer=False
  for conn in self.peers.values():
   conn.done=False
   conn.send({'t':MSG_START,'gen':gen})

 def abort(self,reason):

  for conn in self.peers.values():
   conn.send({'t':MSG_ABORT,'gen':self.gen,'reason':reason})
  self._close_peers()
  self.state='joining'
  self.form_started=time.monotonic()
  self.why_forming=f'generation {self.gen}: {reason}'

 def end(self,code,reason,blame=None):

  for conn in self.peers.values():
   if not conn.done:
    conn.send({'t':MSG_END,'code':code,'reason':reason,'blame':blame})
  self._close_peers()
  self.close_listeners()

 def stop_all(self,host):

  self.stop_host=host
  self.state='stopping'
  for rank,conn in self.peers.items():
   if not conn.done:
    conn.send({'t':MSG_STOP,'host':host})
   self.told.add(rank)
  self._close_peers()

 def all_told(self):
  return self.expected<=self.told

 def _close_peers(self):
  for conn in list(self.peers.values())+list(self.members):
   conn.flush(0.2)
   self._drop(conn)
  self.peers.clear()
  self.lasts.clear()

 def tick(self,now):
  cfg=self.cfg
  if now-self.last_beat>=cfg.hb_interval:
   self.last_beat=now
   for conn in list(self.peers.values()):
    conn.send({'t':MSG_HB})
  else:
   for conn in self.peers.values():
    conn.flush()
  for conn in list(self.unproven):
   if now-conn.since<=AUTH_TIMEOUT:
    break
   self._stranger(conn,f'sent no proof of membership within {AUTH_TIMEOUT:g}s')
  for conn in list(self.members):
   if now-conn.since>HANDSHAKE_TIMEOUT:
    self._drop(conn)
  self.strangers.roll(now)
  for _,conn in sorted(self.peers.items()):
   if conn.closed:
    self._gone(conn,'broke its liveness connection (a send to it failed: reset or broken pipe)')
   elif not conn.done and now-conn.last_rx>cfg.hb_timeout:
    self._gone(
     conn,
     f'silent for {now - conn.last_rx:.1f}s (> KGEN_HEARTBEAT_TIMEOUT={cfg.hb_timeout:g}s): '
     f'frozen or cut off',
    )

 def finish(self):

  self.state='finishing'
  self.close_listeners()
  self.strangers.roll(time.monotonic(),final=True)
  for conn in list(self.unproven)+list(self.members):
   self._drop(conn)
  for conn in self.peers.values():
   conn.send({'t':MSG_DONE})

 def all_done(self):
  return all(conn.done or conn.closed for conn in self.peers.values())

 def close(self):
  self._close_peers()
  for conn in list(self.unproven):
   self._drop(conn)
  self.close_listeners()
  self.strangers.roll(time.monotonic(),final=True)







class Spoke:


 def __init__(self,cfg,sel,conn):
  self.cfg,self.sel,self.conn=cfg,sel,conn
  self.master_done=False
  self.start_gen:int|None=None


  self.verdict:tuple|None=None
  conn.register(sel)
  Running.link=self
  self._drain(True)

 def on_event(self,data):
  self._drain(self.conn.fill())

 def _drain(self,alive):
  while not self.conn.closed:
   try:
    msg=self.conn.pop()
    if msg is None:
     break
    self._handle(msg)
   except Exception as exc:
    if not isinstance(exc,ProtocolError):
     internal_error(exc,'handling a line from node 0')
    self.close()
    self._set(('lost',f'the liveness connection to node 0 broke: {shown(str(exc))}'))
    return
  if not alive and not self.conn.closed:
   self.close()
   if not self.master_done:
    self._set(
     (
      'lost',
      'the liveness connection to node 0 closed (node 0 died, was deleted or its entrypoint '
      'was killed)',
     )
    )

 def _handle(self,msg):


  t=msg['t']
  if t==MSG_START:
   self.start_gen=msg['gen']
  elif t==MSG_ABORT:
   self._set(('abort',shown(msg['reason'],1000)))
  elif t==MSG_END:
   self._set(('end',msg['code'],msg['blame'],shown(msg['reason'],1000)))
  elif t==MSG_STOP:
   self._set(('stop',shown(msg['host'])))
  elif t==MSG_DONE:
   self.master_done=True
   log('node 0 finished successfully')
  elif t==MSG_DUMP:
   HANG.dump_for(self)
  elif t!=MSG_HB:
   raise ProtocolError(f'node 0 sent {t!r} to a joined node')

 def _set(self,verdict):
  if self.verdict is None:
   self.verdict=verdict

 def close(self):
  self.conn.close()

 def tick(self,now):
  conn=self.conn
  if conn.closed:
   if not self.master_done:
    self._set(('lost','the liveness connection to node 0 broke (a send to it failed)'))
   return
  if now-conn.last_tx>=self.cfg.hb_interval:
   conn.send({'t':MSG_HB})
  else:
   conn.flush()
  if not self.master_done and now-conn.last_rx>self.cfg.hb_timeout:
   self.close()
   self._set(
    (
     'lost',
     f'node 0 silent for {now - conn.last_rx:.1f}s (> KGEN_HEARTBEAT_TIMEOUT='
     f'{self.cfg.hb_timeout:g}s): frozen or cut off',
    )
   )

 def send(self,msg,then_close=False):
  self.conn.send(msg)
  self.conn.flush(1.0)
  if then_close:
   self.close()












def torchrun_argv(cfg,command,gen=0,log_dir=''):
 argv=[
  sys.executable,
  '-m',
  'torch.distributed.run',
  f'--nnodes={cfg.nnodes}',
  f'--nproc-per-node={cfg.nproc}',
  '--rdzv-backend=static',
  f'--master-addr={cfg.master_addr}',
  f'--master-port={cfg.master_port}',
  f'--node-rank={cfg.node_rank}',
  f'--rdzv-id={cfg.rdzv_id}-g{gen}',
  f'--rdzv-conf=timeout={cfg.rdzv_timeout}',
  '--max-restarts=0',
  '--monitor-interval=0.1',
 ]
 if log_dir:
  argv+=['--redirects=3',f'--log-dir={log_dir}']
 if command[0]=='-m':
  return argv+['-m']+[torchrun_literal(a)for a in command[1:]]
 if command[0].endswith('.py'):
  return argv+[torchrun_literal(a)for a in command]
 return argv+['--no-python',command[0]]+[torchrun_literal(a)for a in command[1:]]


_NOT_TORCHRUN_MACRO=re.compile(r'\$(?!\{local_rank\}|local_rank(?![A-Za-z0-9_]))')


def torchrun_literal(arg):


 return _NOT_TORCHRUN_MACRO.sub('$$',arg)





NESTED_PROBLEM=(
 "{launcher} is a launcher, and kgen's entrypoint already starts torchrun on every node "
 '(nested, each node would train alone as its own one-node world)'
)
LOCAL_RANK_NOTE='the script gets LOCAL_RANK in its environment, not a --local_rank argument'
_LAUNCHER_FLAGS={
 'torchrun':{'standalone','m','module','no_python','run_path','virtual_local_rank','use_env','h'},
 'accelerate':{'h','help','q','quiet','cpu','multi_gpu','tpu','ipex','enable_cpu_affinity',
       'dynamo_use_fullgraph','dynamo_use_dynamic','use_deepspeed','use_fsdp','use_megatron_lm',
       'use_xpu','same_network','m','module','no_python','tpu_cluster','no_tpu_cluster',
       'tpu_use_sudo','downcast_bf16','fp8_use_autocast_during_eval','debug'},
 'deepspeed':{'h','help','module','no_python','no_local_rank','no_ssh','no_ssh_check','force_multi',
      'save_pid','elastic_training','bind_cores_to_rank'},
}
_LAUNCHER_MODULES={
 'torch.distributed.run':'torchrun',
 'torch.distributed.launch':'torchrun',
 'accelerate.commands.launch':'accelerate',
 'deepspeed.launcher.runner':'deepspeed',
}
_NPROC_OPTIONS={'torchrun':('nproc_per_node',),'deepspeed':('num_gpus','num_accelerators')}


def _launcher_start(command):

 head=command[0].rsplit('/',1)[-1]if command else''
 if head in('torchrun','deepspeed','accelerate-launch'):
  return command[0],{'accelerate-launch':'accelerate'}.get(head,head),1
 if head=='accelerate':
  i=1
  while i<len(command)and command[i].startswith('-')and command[i]not in('-h','--help'):
   i+=1
  return(f'{command[0]} launch','accelerate',i+1)if command[i:i+1]==['launch']else None
 at=0
 if re.fullmatch(r'python(\d+(\.\d+)*)?',head):
  at=1
  while at<len(command)and not(command[at]=='-m'or re.match(r'-m[^-]',command[at])):
   if not command[at].startswith('-')or command[at]in('-','-c','--'):
    return None
   at+=2 if command[at]in('-X','-W','--check-hash-based-pycs')else 1
 if at<len(command)-1 and command[at]=='-m':
  module,first=command[at+1],at+2
 elif at<len(command)and re.match(r'-m[^-]',command[at]):
  module,first=command[at][2:],at+1
 else:
  return None
 family=_LAUNCHER_MODULES.get(module)
 return(' '.join([*command[:at],'-m',module]),family,first)if family else None


def nested_launcher(command):


 found=_launcher_start(command)
 if found is None:
  return None
 launcher,family,i=found
 opts:dict[str,tuple[str,str|None]]={}
 while i<len(command)and command[i].startswith('-')and command[i]!='-':
  word=command[i]
  if word=='--':
   i+=1
   break
  name=word.split('=',1)[0]
  if word.startswith('--')and'='in word:
   opts[name.lstrip('-').replace('-','_')]=(name,word.split('=',1)[1])
   i+=1
  elif not word.startswith('--')and word[1:2]in'rtHie'and len(word)>2:
   opts[word[1]]=(word[:2],word[2:])
   i+=1
  elif word.lstrip('-').replace('-','_')in _LAUNCHER_FLAGS[family]:
   opts[word.lstrip('-').replace('-','_')]=(word,None)
   i+=1
  else:
   opts[word.lstrip('-').replace('-','_')]=(word,command[i+1]if i+1<len(command)else None)
   i+=2
 script,args=(command[i],command[i+1:])if i<len(command)else('SCRIPT',[])
 if'm'in opts or'module'in opts:
  inner=['-m',script,*args]
 elif'no_python'in opts or script.endswith('.py')or script=='SCRIPT':
  inner=[script,*args]
 else:
  inner=['python3',script,*args]

 def number(name):
  value=opts.get(name,('',None))[1]
  return int(value)if value is not None and re.fullmatch(r'\d+',value.strip())else None

 nproc,option=None,''
 if family=='accelerate'and'num_processes'in opts:
  total,machines=number('num_processes'),number('num_machines')or 1
  nproc=total//machines if total is not None and total%machines==0 else None
  option=' '.join(opts['num_processes'])+(f' over {machines} machines'if machines>1 else'')
 for name in _NPROC_OPTIONS.get(family,()):
  if name in opts and not option:
   nproc,option=number(name),' '.join(opts[name])
 nnodes=number({'torchrun':'nnodes','accelerate':'num_machines','deepspeed':'num_nodes'}[family])
 local_rank_arg=(family=='deepspeed'and'no_local_rank'not in opts)or(
  launcher.endswith('torch.distributed.launch')and'use_env'not in opts
 )
 return launcher,inner,nproc,option,1 if'standalone'in opts else nnodes,local_rank_arg


def launcher_problem(command,env):

 nested=nested_launcher(command)
 if nested is None:
  return None
 launcher,inner,nproc,option,nnodes,local_rank_arg=nested
 notes,prefix=[],[]
 for var,asked,how in(('NPROC_PER_NODE',nproc,f'its {option}'),('NNODES',nnodes,f'its {nnodes} nodes')):
  have=(env.get(var)or'').strip()
  if asked is None or(var=='NNODES'and asked<2):
   continue
  if not have:
   prefix.append(f'{var}={asked}')
  elif have!=str(asked):
   notes.append(f"{how} disagree{'s' * (var == 'NPROC_PER_NODE')} with {var}={have}")
 if local_rank_arg:
  notes.append(LOCAL_RANK_NOTE)
 name=os.path.basename(script_path())
 me=sys.argv[0]if os.path.basename(sys.argv[0])==name else name
 use=' '.join(shlex.quote(w)for w in[*prefix,'python3',me,'--',*inner])
 return'; '.join([NESTED_PROBLEM.format(launcher=launcher),*notes,f'use: {use}'])


def check_command(command,env=None):
 if not command:
  fatal(
   EXIT_CONFIG,
   "no command after '--': give the training command, e.g. "
   '-- train.py --lr 3e-4, or use --smoke-test / --diagnose',
  )
 nested=launcher_problem(command,os.environ if env is None else env)
 if nested:
  fatal(EXIT_CONFIG,nested)
 head=command[0]
 if head=='-m':
  if len(command)<2 or command[1].startswith('-'):
   fatal(EXIT_CONFIG,"'-m' needs a module name: -- -m package.module [args]")
 elif head.startswith('-'):
  fatal(
   EXIT_CONFIG,f"command starts with the option {head!r}: give a script, '-m module' or a program after '--'"
  )
 elif head.endswith('.py')and not os.path.isfile(head):
  fatal(
   EXIT_CONFIG,
   f'training script {head!r} not found (working directory '
   f'{os.getcwd()}): check the path, the image and workingDir',
  )























STANDBY_PROGRAM="""import json, os, sys
import torch.distributed.run as run
path = os.fdopen(int(sys.argv[1])).readline().strip()
if not path:
    sys.exit(0)
with open(path) as fh:
    spec = json.load(fh)
os.unlink(path)
if spec["wait"]:
    import socket, time
    host, port, bound, every = spec["wait"]
    end = time.monotonic() + bound
    try:
        addrs = [a[4] for a in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]
    except OSError:
        addrs = []
    while addrs and time.monotonic() < end:
        try:
            socket.create_connection(addrs[0][:2], 1).close()
            break
        except OSError:
            addrs = addrs[1:] + addrs[:1]
            time.sleep(every)
os.environ.clear()
os.environ.update(spec["env"])
sys.argv = [run.__file__, *spec["argv"]]
run.main()
"""


class Standby:


 def __init__(self):
  self.proc:subprocess.Popen|None=None
  self.fd=-1
  self.since=0.0

 def ready(self):

  if self.proc is not None and self.proc.poll()is None:
   return
  self.discard()
  rfd,wfd=os.pipe()
  try:
   _prctl()
   self.proc=subprocess.Popen(
    [sys.executable,'-c',STANDBY_PROGRAM,str(rfd)],
    start_new_session=True,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    pass_fds=(rfd,),
    preexec_fn=_torchrun_dies_with_us,
   )
  except OSError as exc:
   log(f'note: no standby agent ({exc}): the next torchrun starts when the group has formed')
   os.close(wfd)
   self.proc=None
   return
  finally:
   os.close(rfd)
  self.fd,self.since=wfd,time.monotonic()

 def take(self,argv,env,log_dir,base_rank,wait):



  proc=self.proc
  if proc is None or proc.poll()is not None or not log_dir:
   self.discard()
   return None
  path=''
  try:
   fd,path=tempfile.mkstemp(prefix='kgen-agent-',suffix='.json')
   with os.fdopen(fd,'w')as fh:
    json.dump({'argv':argv[3:],'env':env,'wait':wait},fh)
   os.write(self.fd,path.encode()+b'\n')
  except OSError as exc:
   log(f'note: the standby agent not used ({exc}): torchrun starts anew')
   if path:
    with contextlib.suppress(OSError):
     os.unlink(path)
   self.discard()
   return None
  os.close(self.fd)
  self.proc,self.fd=None,-1
  log(f'torchrun is the standby agent started {time.monotonic() - self.since:.1f}s ago (torch imported since)')
  return Child(argv,env,log_dir,base_rank,proc)

 def discard(self):

  proc,self.proc=self.proc,None
  if self.fd>=0:
   os.close(self.fd)
   self.fd=-1
  if proc is not None and proc.poll()is None:
   try:
    os.killpg(proc.pid,signal.SIGKILL)
   except OSError:
    pass
   proc.wait()
  if proc is not None:
   for pipe in(proc.stdout,proc.stderr):
    if pipe is not None:
     pipe.close()


STANDBY=Standby()












def start_torchrun(cfg,command,gen):
 try:
  import tempfile

  log_dir=tempfile.mkdtemp(prefix=f'kgen-torchrun-g{gen}-')
 except OSError as exc:
  log(f"note: no temporary folder for the workers' output ({exc}): their lines go out unprefixed")
  log_dir=''
 argv=torchrun_argv(cfg,command,gen,log_dir)
 restarts=str(cfg.restart_base+gen)
 env=dict(os.environ,KGEN_RESTART_COUNT=restarts,KGEN_RDZV_ID=f'{cfg.rdzv_id}-g{gen}')
 env.update(HANG.worker_env(env))
 log(f'generation {gen}: starting: '+' '.join(argv[1:]))
 wait=None if cfg.is_master else(cfg.master_addr,cfg.master_port,cfg.rdzv_timeout,refused_poll(cfg.nnodes))
 standby=STANDBY.take(argv,env,log_dir,cfg.node_rank*cfg.nproc,wait)
 if standby is not None:
  return standby
 try:
  return Child(argv,env,log_dir,cfg.node_rank*cfg.nproc)
 except OSError as exc:
  fatal(EXIT_CONFIG,f'cannot start torchrun with {sys.executable}: {exc}')
  raise AssertionError from exc


def poll(sel,sigs,link,timeout=0.1):

 for key,_ in sel.select(timeout=timeout):
  if key.data[0]=='signal':
   sigs.drain()
  elif link is not None:
   link.on_event(key.data)


def excuse_own_absence(conns,took,cfg):


 if took>2*cfg.hb_interval:
  for conn in conns:
   conn.last_rx+=took


def stop_after_signal(sigs,child,sig):

 name=signal.Signals(sig).name
 log(f'received {name}: stopping torchrun (SIGKILL after {SIGNAL_GRACE:g}s)')
 if child is not None and child.rc is None:
  try:
   os.killpg(child.pid,sig)
  except OSError:
   pass
  deadline=time.monotonic()+SIGNAL_GRACE
  while child.rc is None and time.monotonic()<deadline:
   if sigs.pending:
    log(f'received {signal.Signals(sigs.pending.pop(0)).name} again: killing the local process tree now')
    break
   sigs.sleep(0.05)
   child.reap()
  finished=child.rc is not None
  child.kill_tree(2.0 if finished else 0.0,signal.SIGTERM if finished else signal.SIGKILL)
  log(f'stopped after {name} (torchrun exit code {child.rc})')
 return Stop(128+sig,f'signal {name}')


def end_local(cfg,sigs,child,stop):


 if child is not None:
  log(f'{stop.reason}: stopping torch (SIGTERM, SIGKILL after {STOP_GRACE:g}s)')
  child.kill_tree(STOP_GRACE,sigs=sigs)
 hold_if_statefulset(cfg,sigs,'stopped by user')
 return stop


def hold_if_statefulset(cfg,sigs,what='run succeeded'):


 STANDBY.discard()
 if cfg.kind!='statefulset':
  return
 log(f'{what}; holding idle so restartPolicy Always does not retrain; kgen stop NAME to remove')
 while not sigs.pending:
  sigs.sleep(3600)


def run_single(cfg,command,sigs):
 child=start_torchrun(cfg,command,0)
 while child.rc is None:
  if sigs.pending:
   sig=sigs.pending.pop(0)
   if sig==signal.SIGINT:
    return end_local(cfg,sigs,child,stopped_by_user(socket.gethostname()))
   return stop_after_signal(sigs,child,sig)
  sigs.sleep(0.1)
  child.reap()
  if child.rc is None and HANG.due(time.monotonic()):
   return end_hang(cfg,child)
 child.failure()
 child.kill_tree(2.0)
 if child.rc:
  return Stop(child.rc,f'torch failed with code {child.rc}')
 hold_if_statefulset(cfg,sigs)
 return Stop(0,'succeeded')


def stop_group(cfg,hub,sigs,child,host):


 stop=stopped_by_user(host)
 log(f'{stop.reason}: stopping every node')
 hub.stop_all(host)
 if child is not None and child.rc is None:
  signal_tree(signal.SIGTERM,child.pid)
  child.termed=True
 deadline=time.monotonic()+STOP_LINGER
 while not hub.all_told()and time.monotonic()<deadline and not sigs.pending:
  poll(hub.sel,sigs,hub)
  hub.tick(time.monotonic())
  if child is not None:
   child.reap()
 if not hub.all_told():
  log(f'node rank(s) {sorted(hub.expected - hub.told)} not connected: not told')
 hub.close()
 return end_local(cfg,sigs,child,stop)


def run_hub(cfg,command,sigs,sel):
 hub=Hub(cfg,sel)
 where=hub.listen(sigs)
 log(
  f'liveness channel listening on port {cfg.liveness_port} at {where}; connections prove membership with '
  f'the run secret; waiting for {cfg.nnodes - 1} node(s), bound KGEN_RDZV_TIMEOUT={cfg.rdzv_timeout}s'
 )
 while True:

  while not hub.complete():
   poll(sel,sigs,hub)
   if sigs.pending and sigs.pending[0]==signal.SIGINT:
    sigs.pending.pop(0)
    return stop_group(cfg,hub,sigs,None,socket.gethostname())
   if sigs.pending:
    hub.close()
    return stop_after_signal(sigs,None,sigs.pending.pop(0))
   if hub.stop_host is not None:
    return stop_group(cfg,hub,sigs,None,hub.stop_host)
   now=time.monotonic()
   hub.tick(now)
   reason=hub.form_deadline_passed(now)
   if hub.script_fail is not None and hub.script_fail[3]:
    blame,_,_,reason=hub.script_fail
    log(f'FAIL-STOP: {reason}')
    hub.end(EXIT_RUN_FAILED,reason,blame)
    return Stop(EXIT_RUN_FAILED,f'the run failed ({reason})')
   if reason is not None:
    log(f'FAIL-STOP: {reason}')
    hub.end(EXIT_PEERS_MISSING if cfg.max_reformations else EXIT_PEER_LOST,reason)
    return Stop(EXIT_PEERS_MISSING,f'group could not form: {reason}')
  gen=hub.next_generation()
  if gen>0 and gen>cfg.max_reformations:
   reason=f're-formation limit reached (KGEN_MAX_REFORMATIONS={cfg.max_reformations}): {hub.why_forming}'
   hub.end(EXIT_RUN_FAILED,reason)
   return Stop(EXIT_RUN_FAILED,reason)
  formed=time.monotonic()-hub.form_started
  log(f'all {cfg.nnodes} nodes connected after {formed:.1f}s: generation {gen}')
  hub.start(gen)
  stop=HEALTH.run(cfg,sigs,hub,gen)
  if stop is not None:
   return stop
  child=start_torchrun(cfg,command,gen)
  own_rc:int|None=None
  now=time.monotonic()
  while True:
   before=now
   poll(sel,sigs,hub)
   child.reap()
   now=time.monotonic()
   took=now-before
   finished=hub.state=='finishing'
   if took>cfg.hb_timeout-cfg.hb_interval and finished:
    log(f'this node was frozen for {took:.1f}s after it finished: the others finish by themselves')
    hub.close()
    hold_if_statefulset(cfg,sigs)
    return Stop(0,'succeeded')
   if took>cfg.hb_timeout-cfg.hb_interval:
    reason=(
     f'this node was frozen for {took:.1f}s (about KGEN_HEARTBEAT_TIMEOUT={cfg.hb_timeout:g}s): the '
     f'others have dropped it'
    )
    log(f'FAIL-STOP: {reason}')
    hub.close()
    child.kill_tree(ABORT_GRACE)
    return Stop(EXIT_DROPPED,f'dropped from the group ({reason})')
   excuse_own_absence(hub.peers.values(),took,cfg)
   if sigs.pending and sigs.pending[0]==signal.SIGINT:
    sigs.pending.pop(0)
    return stop_group(cfg,hub,sigs,child,socket.gethostname())
   if hub.stop_host is not None:
    return stop_group(cfg,hub,sigs,child,hub.stop_host)
   if sigs.pending and finished:
    name=signal.Signals(sigs.pending.pop(0)).name
    log(f'received {name} after this node finished: the others finish by themselves')
    hub.close()
    return Stop(0,'succeeded')
   if sigs.pending:
    sig=sigs.pending[0]
    reason=f'node 0 received {signal.Signals(sig).name} (pod deleted or stopped)'
    verdict,code,_=decide(cfg,'lost',hub.gen)
    if hub.state=='training':
     hub.abort(reason)if verdict==REFORM else hub.end(code,reason)
    hub.close()
    return stop_after_signal(sigs,child,sigs.pending.pop(0))
   if child.rc is not None and own_rc is None:
    own_rc=child.rc
    if own_rc==0:
     child.kill_tree(2.0)
     log('torchrun finished successfully; waiting for the other nodes to finish')
     hub.finish()
    else:
     log(f'torchrun exited with code {own_rc}')
     hub.script_failed(0,own_rc)
     said=child.failure()
     if said and said.get('peer'):
      hub.own_failure_was_a_peers()
   hub.tick(now)
   if own_rc is None and hub.state=='training'and HANG.due(now):
    return end_hang(cfg,child,hub,sigs)
   if hub.state=='finishing':
    if hub.lost is not None:
     log(f'{hub.lost}; this node had already finished successfully')
     hub.close()
     hold_if_statefulset(cfg,sigs)
     return Stop(0,'succeeded')
    if hub.all_done():
     hub.close()
     log('all nodes finished')
     hold_if_statefulset(cfg,sigs)
     return Stop(0,'succeeded')
    continue
   fault,blame=None,None
   if hub.script_fail is not None and hub.script_fail[3]:
    blame,_,_,reason=hub.script_fail
    fault,what='internal','the run failed'
   elif hub.lost is not None:
    fault,reason,what='lost',hub.lost,'peer lost'
   elif hub.script_fail is not None and now-hub.script_fail[2]>=FAIL_VERDICT_WAIT:
    blame,rc,_,_=hub.script_fail
    fault,reason,what='script',f"node {blame}'s torchrun exited with code {rc}",'script failed'
   if fault is None:
    continue
   verdict,code,why=decide(cfg,fault,hub.gen)
   if verdict==REFORM:
    log(f'{what}: {reason}; stopping torch and re-forming (generation {hub.gen + 1})')
    hub.abort(reason)
    child.kill_tree(ABORT_GRACE)
    STANDBY.ready()
    break
   if code==EXIT_RUN_FAILED and fault=='lost':
    reason=f'{why}: {reason}'
   log(f'FAIL-STOP: {reason}')
   hub.end(code,reason,blame)
   child.kill_tree(ABORT_GRACE)
   if own_rc and blame==0:
    return Stop(own_rc,f'torch failed with code {own_rc}')
   return Stop(code,f'{what} ({reason})')


def spoke_signal(cfg,sigs,spoke,child):


 sig=sigs.pending.pop(0)
 if sig==signal.SIGINT:
  host=socket.gethostname()
  spoke.send({'t':MSG_STOP,'host':host},True)
  log('received SIGINT: stopped by user; node 0 told to stop every node')
  return end_local(cfg,sigs,child,stopped_by_user(host))
 spoke.send({'t':MSG_LEAVE,'reason':f'received {signal.Signals(sig).name} (pod deleted or stopped)'},True)
 return stop_after_signal(sigs,child,sig)


def run_spoke(cfg,command,sigs,sel):
 last=-1
 while True:
  spoke=Spoke(cfg,sel,wait_for_master(cfg,sigs,last))
  while spoke.start_gen is None and spoke.verdict is None:
   poll(sel,sigs,spoke)
   if sigs.pending:
    return spoke_signal(cfg,sigs,spoke,None)
   spoke.tick(time.monotonic())
  if spoke.start_gen is None:
   verdict=spoke.verdict
   spoke.close()
   if verdict[0]=='stop':
    log(f'node 0 says: stopped by user on {verdict[1]}')
    return end_local(cfg,sigs,None,stopped_by_user(verdict[1]))
   if verdict[0]=='end':
    log(f'FAIL-STOP: node 0 ended the run: {verdict[-1]}')
    return Stop(verdict[1],f'node 0 ended the run ({verdict[-1]})')
   log(f'node 0 lost while waiting to start ({verdict[-1]}): joining again')
   continue
  gen=spoke.start_gen
  stop=HEALTH.run(cfg,sigs,spoke,gen)
  if stop is not None:
   return stop
  child=start_torchrun(cfg,command,gen)
  own_rc:int|None=None
  now=time.monotonic()
  while True:
   before=now
   poll(sel,sigs,spoke)
   child.reap()
   now=time.monotonic()
   excuse_own_absence([spoke.conn],now-before,cfg)
   if sigs.pending:
    return spoke_signal(cfg,sigs,spoke,child)
   if child.rc is not None and own_rc is None:
    own_rc=child.rc
    if own_rc==0:
     child.kill_tree(2.0)
     log('torchrun finished successfully')
     spoke.send({'t':MSG_DONE},True)
     hold_if_statefulset(cfg,sigs)
     return Stop(0,'succeeded')
    log(f'torchrun exited with code {own_rc}; node 0 decides: a lost node (re-form) or a script error')
    spoke.send({'t':MSG_FAIL,'rc':own_rc})
    child.failure()
   spoke.tick(time.monotonic())
   HANG.report(spoke,time.monotonic())
   if spoke.verdict is None:
    continue
   kind=spoke.verdict[0]
   reason=spoke.verdict[-1]
   spoke.close()
   if kind=='stop':
    log(f'node 0 says: stopped by user on {reason}')
    return end_local(cfg,sigs,child,stopped_by_user(reason))
   if kind=='end':
    log(f'FAIL-STOP: node 0 ended the run: {reason}')
    child.kill_tree(ABORT_GRACE)
    if own_rc and spoke.verdict[2]==cfg.node_rank:
     return Stop(own_rc,f'torch failed with code {own_rc}')
    return Stop(spoke.verdict[1],f'node 0 ended the run ({reason})')
   if kind=='lost':
    verdict,code,why=decide(cfg,'lost',gen)
    if verdict!=REFORM:
     log(f'FAIL-STOP: {reason}')
     child.kill_tree(ABORT_GRACE)
     what='peer lost'if code==EXIT_PEER_LOST else why
     return Stop(code,f'{what} (node 0: {reason})')
    reason=f'node 0 lost: {reason}'
   log(f're-forming: {reason}; stopping torch (generation {gen})')
   child.kill_tree(ABORT_GRACE)
   STANDBY.ready()
   last=gen
   break


def run(cfg,command):


 sigs=Signals()
 sel=selectors.DefaultSelector()
 sel.register(sigs.rfd,selectors.EVENT_READ,('signal',None))
 set_child_subreaper()
 check_torch()
 try:
  if cfg.nnodes==1:
   stop=run_single(cfg,command,sigs)
  elif cfg.is_master:
   stop=run_hub(cfg,command,sigs,sel)
  else:
   stop=run_spoke(cfg,command,sigs,sel)
 except Stop:
  raise
 except Exception as exc:
  stop=internal_stop(exc)
 finally:
  STANDBY.discard()
 HANG.cleanup()
 raise stop


def internal_stop(exc):



 reason=internal_error(exc)
 link,child=Running.link,Running.child
 try:
  if isinstance(link,Hub):
   link.end(EXIT_RUN_FAILED,reason,0)
   link.close()
  elif isinstance(link,Spoke)and not link.conn.closed:
   what=f'{type(exc).__name__}: {shown(str(exc), 300)}'
   link.send({'t':MSG_FAIL,'rc':EXIT_INTERNAL,'internal':what},then_close=True)
 except Exception:
  pass
 try:
  if child is not None:
   child.kill_tree(ABORT_GRACE)
  else:
   signal_tree(signal.SIGKILL)
 except Exception:
  signal_tree(signal.SIGKILL,child.pid if child is not None else None)
 return Stop(EXIT_INTERNAL,reason)


def request_stop(env):


 cfg=load_config(env,with_rank=False)
 if cfg.problems:
  fatal(EXIT_CONFIG,cfg.problems)
 if cfg.nnodes==1:
  fatal(EXIT_CONFIG,'--stop: NNODES=1 has no liveness channel: stop that node with Ctrl-C (SIGINT)')
 target=f'{cfg.master_addr}:{cfg.liveness_port}'
 host=socket.gethostname()
 try:
  told,detail=tell_node0_stop(cfg,host,STOP_BUDGET)
 except Denied as exc:
  wrong_secret(cfg,target,str(exc))
  raise AssertionError from exc
 if not told:
  sys.stderr.write(
   f'kgen-entrypoint: error: --stop: node 0 at {target} not reachable within {STOP_BUDGET:g}s ({detail}): '
   'nothing was stopped; the run may have ended, or node 0 is down (then Ctrl-C each node)\n'
  )
  return EXIT_MASTER_UNREACHABLE
 print(f'kgen-entrypoint: stop: {detail}; every node exits {EXIT_STOPPED} (stopped by user on {host})',flush=True)
 return 0












def smoke_worker():
 from datetime import timedelta

 import torch
 import torch.distributed as dist

 rank=int(os.environ['RANK'])
 world=int(os.environ['WORLD_SIZE'])
 local=int(os.environ.get('LOCAL_RANK','0'))
 cuda=torch.cuda.is_available()
 if cuda:
  torch.cuda.set_device(local)
  device,backend=torch.device('cuda',local),'nccl'
 else:
  device,backend=torch.device('cpu'),'gloo'
 tag=f'[smoke rank {rank}/{world}]'
 t0=time.monotonic()
 dist.init_process_group(backend,timeout=timedelta(seconds=120))
 t_init=time.monotonic()-t0
 numel=(64<<20 if cuda else 4<<20)//4
 x=torch.full((numel,),float(rank+1),dtype=torch.float32,device=device)
 expected=world*(world+1)/2
 dist.all_reduce(x)
 if cuda:
  torch.cuda.synchronize()
 bad=(x!=expected).sum().item()
 if bad:
  sys.stderr.write(
   f'{tag} FAIL: all-reduce sum wrong in {bad} of {numel} elements: got {x[0].item()} expected {expected}\n'
  )
  return 1
 iters=5
 times=[]
 for _ in range(iters):
  x.fill_(float(rank+1))
  if cuda:
   torch.cuda.synchronize()
  t=time.monotonic()
  dist.all_reduce(x)
  if cuda:
   torch.cuda.synchronize()
  times.append(time.monotonic()-t)
  if x[0].item()!=expected or x[-1].item()!=expected:
   sys.stderr.write(f'{tag} FAIL: all-reduce sum {x[0].item()} != {expected}\n')
   return 1
 best=min(times)
 size=numel*4
 algbw=size/best/1e9
 busbw=algbw*2*(world-1)/world if world>1 else algbw
 timing=torch.tensor([best],dtype=torch.float64,device=device)
 dist.all_reduce(timing,op=dist.ReduceOp.MAX)
 print(f'{tag} ok: backend {backend}, init {t_init:.2f}s, sum {expected:g} correct',flush=True)
 if rank==0:
  slow=timing.item()
  print(
   f'kgen smoke-test: PASS world_size={world} backend={backend} '
   f'all-reduce {size >> 20} MiB: {slow * 1e3:.1f} ms (slowest rank), '
   f'algbw {size / slow / 1e9:.3f} GB/s, busbw '
   f'{size / slow / 1e9 * 2 * (world - 1) / max(world, 1):.3f} GB/s '
   f'(rank 0: {algbw:.3f}/{busbw:.3f})',
   flush=True,
  )
 dist.barrier()
 dist.destroy_process_group()
 return 0












def _iface_check(var,value):
 if not value:
  return True,f'{var} not set: the library picks an interface itself'
 try:
  names=[name for _,name in socket.if_nameindex()]
 except OSError as exc:
  return False,f'{var}={value}: cannot list interfaces ({exc})'
 spec=value
 exclude=spec.startswith('^')
 exact=spec.lstrip('^').startswith('=')
 wanted=[w for w in spec.lstrip('^').lstrip('=').split(',')if w]
 if exclude:
  left=[n for n in names if not any((n==w)if exact else n.startswith(w)for w in wanted)]
  if left:
   return True,f"{var}={value}: usable {', '.join(left)}"
  return False,f"{var}={value} excludes every interface ({', '.join(names)})"
 missing=[w for w in wanted if not any((n==w)if exact else n.startswith(w)for n in names)]
 if missing:
  return False,(
   f"{var}={value}: no interface matches {', '.join(missing)} (have "
   f"{', '.join(names)}); set it to the pod network interface, e.g. eth0"
  )
 return True,f'{var}={value}: present'


def probe_node0(cfg,host):


 if cfg.secret is None:
  try:
   sock=socket.create_connection((host,cfg.liveness_port),timeout=3)
  except OSError as exc:
   return False,f'does not accept ({exc.strerror or exc})'
  try:
   line,_=_read_line(sock,b'',time.monotonic()+3,PREAUTH_LINE_MAX)
   hello=parse_plain(line)
  except(OSError,ProtocolError):
   hello={'t':None}
  finally:
   sock.close()
  if hello['t']!=MSG_CHALLENGE:
   return False,'accepts, but what answers is not a kgen entrypoint (no challenge)'
  return True,(
   f"accepts (kgen liveness protocol {hello['v']}); without the run's secret node 0 tells nothing "
   f'more: set KGEN_SECRET_FILE to see which nodes joined'
  )
 try:
  sock,_,answer,_=open_session(cfg,{'t':MSG_PROBE},timeout=3,host=host)
 except Denied as exc:
  return False,(
   f"accepts, but node 0 refused this host's proof of the run secret ({exc}): {cfg.secret_source} "
   f"gives another secret than node 0's"
  )
 except ProtocolError as exc:
  return False,f"accepts, but did not prove it is this run's node 0 ({exc})"
 except OSError as exc:
  return False,f"does not accept ({getattr(exc, 'strerror', None) or exc})"
 sock.close()
 if answer['t']!=MSG_STATUS:
  return False,f"accepts, but node 0 answered {answer['t']!r}"
 joined,nnodes=set(answer['joined']),answer['nnodes']
 missing=[r for r in range(1,min(nnodes,1<<16))if r not in joined]
 return True,(
  f"accepts; node 0's entrypoint (run {shown(answer['id'])}) has {len(joined)} of {nnodes - 1} peers"
  +(f', missing {missing[:64]}'if missing else'')
 )


def running_job_status(cfg):

 if cfg.secret is None:
  return''
 for host in dict.fromkeys({'0.0.0.0':'127.0.0.1','::':'::1'}.get(h,h)for h in bind_addresses(cfg)[0]):
  try:
   sock,_,answer,_=open_session(cfg,{'t':MSG_PROBE},timeout=2,host=host)
  except(OSError,ProtocolError,Denied):
   continue
  sock.close()
  if answer['t']==MSG_STATUS and answer['id']==cfg.rdzv_id:
   return f"node 0's entrypoint (run {cfg.rdzv_id}) is running with {len(answer['joined'])} peer(s)"
 return''


def _proc_net_addr(text,v6):
 raw=bytes.fromhex(text)
 if not v6:
  return socket.inet_ntop(socket.AF_INET,raw[::-1])
 return socket.inet_ntop(socket.AF_INET6,b''.join(raw[i:i+4][::-1]for i in range(0,16,4)))


def listening_addresses(port):


 found:set[str]=set()
 readable=False
 for path,v6 in(('/proc/net/tcp',False),('/proc/net/tcp6',True)):
  try:
   with open(path)as fh:
    rows=fh.read().splitlines()[1:]
  except OSError:
   continue
  readable=True
  for row in rows:
   fields=row.split()
   if len(fields)<4 or fields[3]!='0A':
    continue
   addr,_,port_hex=fields[1].rpartition(':')
   try:
    if int(port_hex,16)==port:
     found.add(_proc_net_addr(addr,v6))
   except ValueError:
    continue
 return sorted(found)if readable else None


def interface_addresses():

 try:
  import fcntl
  import struct

  names=[name for _,name in socket.if_nameindex()]
  sock=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)
 except(ImportError,OSError):
  return[]
 out=[]
 try:
  for name in names:
   try:
    res=fcntl.ioctl(sock.fileno(),0x8915,struct.pack('256s',name.encode()[:15]))
   except OSError:
    continue
   out.append((name,socket.inet_ntoa(res[20:24])))
 finally:
  sock.close()
 return out


def exposure(port,authenticated,env):

 bound=listening_addresses(port)
 if bound is None:
  return f'{port}: cannot tell (/proc/net/tcp is not readable)'
 guard=(
  "kgen's liveness channel authenticates every connection"
  if authenticated
  else"torch's store does not authenticate, and torch 2.13 cannot bind it to one address (torchrun's static "
  'rendezvous gives its TCPStore no address or socket: it listens on every interface): fence this port (a '
  'NetworkPolicy on Kubernetes, a host firewall on bare metal; README, Security)'
 )
 if not bound:
  later=''if authenticated else f'; once it runs: {guard}'
  return f'{port}: nothing listens on it yet (the run is not running on this node): cannot tell{later}'
 if any(a in('0.0.0.0','::')for a in bound):
  addrs=[(name,ip)for name,ip in interface_addresses()if not ip.startswith('127.')]
  fabric=[v for v in(env.get('GLOO_SOCKET_IFNAME'),env.get('NCCL_SOCKET_IFNAME'))if v]
  where=', '.join(f'{ip} ({name})'for name,ip in addrs)or'every address of this host'
  text=f"{port} listens on all interfaces ({', '.join(bound)}): reachable at {where} by any host routed there"
  if fabric:
   wanted=[w for spec in fabric for w in spec.lstrip('^=').split(',')if w]
   outside=[f'{ip} ({name})'for name,ip in addrs if not any(name.startswith(w)for w in wanted)]
   if outside:
    text+=f"; outside the training fabric ({', '.join(fabric)}) too: {', '.join(outside)}"
  return f'{text}; {guard}'
 if all(a.startswith('127.')or a=='::1'for a in bound):
  return f"{port} is bound to loopback only ({', '.join(bound)}): not reachable from other hosts"
 return f"{port} is bound to {', '.join(bound)} only: reachable only through that address; {guard}"


def diagnose(env):
 results:list[tuple[bool,str,str]]=[]

 def check(ok,name,detail):
  results.append((ok,name,detail))
  print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}",flush=True)

 cfg=load_config(env)
 rank_problems=[p for p in cfg.problems if'rank'in p and'NNODES is not'not in p and p!=cfg.secret_problem]
 env_problems=[p for p in cfg.problems if p not in rank_problems and p!=cfg.secret_problem]
 if env_problems:
  for p in env_problems:
   check(False,'environment',p)
 else:
  check(
   True,
   'environment',
   f'NNODES={cfg.nnodes} NPROC_PER_NODE={cfg.nproc} MASTER_ADDR='
   f'{cfg.master_addr} MASTER_PORT={cfg.master_port} liveness port '
   f'{cfg.liveness_port}',
  )
 if cfg.secret_problem:
  check(False,'run secret',cfg.secret_problem)
 elif cfg.secret is not None:
  check(True,'run secret',f'{cfg.secret_source} ({len(cfg.secret)} characters)')
 if rank_problems:
  for p in rank_problems:
   check(False,'node rank',p)
 elif cfg.node_rank is not None:
  check(
   True,
   'node rank',
   f"{cfg.node_rank} (from {cfg.rank_source}; looked at {', '.join(cfg.rank_looked_at) or 'nothing else'})",
  )
 if cfg.master_addr:
  try:
   addrs=sorted({a[0]for a in resolve(cfg.master_addr,cfg.master_port or 0)})
   check(True,'master DNS',f"{cfg.master_addr} -> {', '.join(addrs)}")
  except socket.gaierror as exc:
   addrs=[]
   check(
    False,
    'master DNS',
    f'{cfg.master_addr} does not resolve ({exc.strerror}): pod '
    f'0 must exist and the headless Service must publish '
    f'not-ready addresses; check subdomain/serviceName',
   )
  if addrs and cfg.master_port and cfg.liveness_port:
   if cfg.node_rank==0:
    running=running_job_status(cfg)
    for label,port in(('rendezvous',cfg.master_port),('liveness',cfg.liveness_port)):
     s=socket.socket()
     s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)
     try:
      s.bind(('0.0.0.0',port))
      check(True,f'master {label} port',f'{port} is free on node 0')
     except OSError as exc:
      if running:
       check(True,f'master {label} port',f'{port} is in use by this job: {running}')
      else:
       check(
        False,
        f'master {label} port',
        f'{port} cannot be bound on node 0 ({exc.strerror}) and no kgen entrypoint of '
        f'this run answers on the liveness port: another process holds it; pick another '
        f'port',
       )
     finally:
      s.close()
    for label,port in(('rendezvous',cfg.master_port),('liveness',cfg.liveness_port)):
     check(True,f'exposure of the {label} port',exposure(port,label=='liveness',env))
   else:
    ok,detail=probe_node0(cfg,cfg.master_addr)
    if not ok and detail.startswith('does not accept'):
     detail+=(
      ": node 0's entrypoint must be running; check its logs, the container ports and NetworkPolicies"
     )
    check(ok,'master liveness port',f'{cfg.master_addr}:{cfg.liveness_port} {detail}')
    port=cfg.master_port
    try:
     socket.create_connection((cfg.master_addr,port),timeout=3).close()
     check(True,'master rendezvous port',f'{cfg.master_addr}:{port} accepts')
    except OSError as exc:
     check(
      False,
      'master rendezvous port',
      f'{cfg.master_addr}:{port} does not accept ({exc.strerror or exc}): '
      f"node 0's entrypoint/torchrun must be running; check its logs, the "
      f'container ports and NetworkPolicies',
     )
 try:
  st=os.statvfs('/dev/shm')
  size=st.f_frsize*st.f_blocks
  mib=size>>20
  if mib<1024:
   check(
    False,
    '/dev/shm',
    f'{mib} MiB: NCCL and DataLoader workers need more; mount a '
    f'memory-backed emptyDir at /dev/shm (values shmSize, >= 1Gi)',
   )
  else:
   check(True,'/dev/shm',f'{mib} MiB')
 except OSError as exc:
  check(False,'/dev/shm',f'not available ({exc}): mount a memory-backed emptyDir there')
 try:
  import torch

  gpus=torch.cuda.device_count()if torch.cuda.is_available()else 0
  if gpus==0:
   check(True,'GPUs',f'none visible: CPU job, gloo backend, NPROC_PER_NODE={cfg.nproc}')
  elif cfg.nproc and cfg.nproc>gpus:
   check(
    False,
    'GPUs',
    f'{gpus} visible but NPROC_PER_NODE={cfg.nproc}: request '
    f'{cfg.nproc} GPUs per pod or lower NPROC_PER_NODE',
   )
  else:
   extra=f' ({gpus - cfg.nproc} idle)'if cfg.nproc and gpus>cfg.nproc else''
   check(True,'GPUs',f'{gpus} visible, NPROC_PER_NODE={cfg.nproc}{extra}')
 except Exception as exc:
  check(False,'GPUs',f'cannot import torch with {sys.executable} ({exc}): use an image with torch installed')
 for var in('NCCL_SOCKET_IFNAME','GLOO_SOCKET_IFNAME'):
  ok,detail=_iface_check(var,env.get(var))
  check(ok,'interface',detail)
 failed=sum(1 for ok,_,_ in results if not ok)
 print(f"{'PASS' if not failed else 'FAIL'} summary: {len(results) - failed} passed, {failed} failed",flush=True)
 return 1 if failed else 0























HANG_MARK='kgen-entrypoint: hang: '
HANG_POLL,DUMP_WAIT,STACKS_WAIT,STACK_FRAMES=1.0,2.0,4.0,60
STACKS_SIGNAL=signal.SIGRTMIN+4 if hasattr(signal,'SIGRTMIN')else signal.SIGUSR2
MSG_PROGRESS,MSG_DUMP,MSG_STACKS,MSG_STACKED='prog','dump','stacks','stacked'
_WRAPPERS={'wrapper','inner','wrapped','fn','decorate_context','__call__'}
_FRAME_OK=lambda f:type(f)is list and len(f)==3 and _TEXT(f[0])and _int(0)(f[1])and _TEXT(f[2])
FIELDS.update(
 {
  MSG_PROGRESS:{},
  MSG_DUMP:{},
  MSG_STACKS:{
   'rank':(_RANK,REQUIRED),
   'pid':(_int(0),0),
   'frames':(lambda v:type(v)is list and len(v)<=STACK_FRAMES and all(map(_FRAME_OK,v)),[]),
   **{k:(_TEXT,'')for k in('what','where','why','step')},
  },
  MSG_STACKED:{},
 }
)
SITECUSTOMIZE=r"""import os, sys
def _kgen():
    d, r = os.environ.get("KGEN_HANG_DIR"), os.environ.get("RANK")
    if d and r and os.environ.get("LOCAL_RANK") and not os.environ.get("KGEN_STACKS_PID"):
        try:
            import faulthandler, json, threading
            p, s = os.getpid(), os.path.join(d, "stacks", "%d." % os.getpid())
            sys._kgen_dump = open(s + "txt", "ab", buffering=0)
            faulthandler.register(int(os.environ["KGEN_STACKS_SIGNAL"]), sys._kgen_dump, all_threads=True)
            os.environ["KGEN_STACKS_PID"], os.environ["KGEN_PROGRESS_FILE"] = str(p), os.path.join(d, "progress", r)
            st = open("/proc/self/stat", "rb").read().rsplit(b")", 1)[1].split()[19].decode()
            with open(s + "tmp", "w") as fh:
                json.dump({"rank": int(r), "pid": p, "start": st, "main": threading.get_ident()}, fh)
            os.replace(s + "tmp", s + "json")
        except Exception as e:
            sys.stderr.write("kgen: no stacks on a signal in this process: %s\n" % e)
    import importlib.machinery as m, importlib.util as u
    h = os.path.dirname(os.path.abspath(__file__))
    spec = m.PathFinder.find_spec("sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != h])
    if spec and spec.loader:
        sys.modules["sitecustomize"] = u.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["sitecustomize"])
_kgen()
"""


def hang_home(env):

 if(env.get('KGEN_RUN_DIR')or'').strip():
  return os.path.join(env['KGEN_RUN_DIR'].strip(),'hang')
 import tempfile

 tag='-'.join(x for x in((env.get('MASTER_PORT')or'').strip(),(env.get('NODE_RANK')or'').strip(),
          socket.gethostname())if x)
 return os.path.join(tempfile.gettempdir(),f"kgen-hang-{os.getuid()}-{re.sub(r'[^0-9A-Za-z]', '_', tag)}")


def _private_dir(path):
 try:
  os.makedirs(path,0o700,exist_ok=True)
  st=os.lstat(path)
 except OSError:
  return False
 return stat.S_ISDIR(st.st_mode)and st.st_uid==os.getuid()and not st.st_mode&0o077


def parse_dump(text):

 threads:list[tuple[int,list[list]]]=[]
 for line in text.splitlines():
  if line.startswith(('Thread 0x','Current thread 0x')):
   threads.append((int(line.split('0x',1)[1].split()[0],16),[]))
  elif line.startswith('  File "')and threads and' in 'in line:
   path,_,rest=line[8:].rpartition('", line ')
   num,_,func=rest.partition(' in ')
   if num.isdigit():
    threads[-1][1].append([path,int(num),func])
 return threads


def is_library(path):

 import sysconfig

 libs={sysconfig.get_paths().get(k,'')for k in('stdlib','platstdlib')}-{''}
 return'-packages/'in path or path.startswith('<frozen ')or any(path.startswith(lib+'/')for lib in libs)


def stack_summary(frames):


 user=next((i for i,f in enumerate(frames)if not is_library(f[0])),len(frames))
 inside=[f for f in frames[:user]if f[2]not in _WRAPPERS and not f[2].startswith('_')]or frames[:user]
 at=frames[user]if user<len(frames)else frames[-1]if frames else None
 if at is None:
  return'',''
 called=f"{os.path.basename(inside[-1][0]).removesuffix('.py')}.{inside[-1][2]}"if inside else at[2]
 return called,f'{at[0]}:{at[1]}'


def collect_stacks(home,wait=DUMP_WAIT):


 sdir,procs=os.path.join(home,'stacks'),[]
 for name in sorted(n for n in os.listdir(sdir)if n.endswith('.json'))if os.path.isdir(sdir)else[]:
  try:
   with open(os.path.join(sdir,name))as fh:
    rec=json.load(fh)
   pid,path=int(rec['pid']),os.path.join(sdir,f"{rec['pid']}.txt")
   with open(f'/proc/{pid}/stat','rb')as fh:
    if fh.read().rsplit(b')',1)[1].split()[19].decode()!=rec['start']:
     continue
   size=os.path.getsize(path)
   os.kill(pid,STACKS_SIGNAL)
   procs.append([rec,size,path,0.0,-1])
  except(OSError,ValueError,KeyError,TypeError,IndexError):
   continue
 deadline=time.monotonic()+wait
 while procs and time.monotonic()<deadline:
  time.sleep(0.05)
  now=time.monotonic()
  for p in procs:
   size=os.path.getsize(p[2])if os.path.exists(p[2])else p[4]
   p[3],p[4]=(now,size)if size!=p[4]else(p[3],size)
  if all(p[4]>p[1]and now-p[3]>=0.15 for p in procs):
   break
 out=[]
 for rec,start,path,_,_ in procs:
  try:
   with open(path,'rb')as fh:
    fh.seek(start)
    text=fh.read(1<<18).decode('utf-8','replace')
  except OSError:
   text=''
  threads=parse_dump(text)
  frames=next((t[1]for t in threads if t[0]==rec.get('main')),threads[-1][1]if threads else[])
  what,where=stack_summary(frames[:STACK_FRAMES])
  why=''if threads else f'no dump within {wait:g}s (stuck outside Python?)'
  out.append(dict(rank=rec['rank'],pid=rec['pid'],frames=frames[:STACK_FRAMES],what=what,where=where,
      why=why,threads=len(threads),text=text))
 return sorted(out,key=lambda r:(r['rank'],r['pid']))


def rank_spans(ranks):

 rs=sorted(set(ranks))
 parts:list[list[int]]=[]
 for r in rs:
  if parts and parts[-1][1]==r-1:
   parts[-1][1]=r
  else:
   parts.append([r,r])
 return('rank 'if len(rs)==1 else'ranks ')+', '.join(str(a)if a==b else f'{a}-{b}'for a,b in parts)


def group_stacks(stacks,world=None):


 groups:dict={}
 for s in stacks:
  f=s.get('frames')or[]
  g=groups.setdefault(str(f)if f else s.get('why')or'no stack',dict(s,ranks=[],frames=f))
  g['ranks'].append(s['rank'])
 missing=[r for r in range(world or 0)if r not in{s['rank']for s in stacks}]
 if missing:
  groups['']={'ranks':missing,'frames':[],'why':'no stack: not registered'}
 out=[{k:g.get(k)or''for k in('what','where','why')}|{'ranks':g['ranks'],'frames':g['frames']}
     for g in groups.values()]
 sizes=sorted((len(g['ranks'])for g in out if g['frames']),reverse=True)+[0,0]
 waits=lambda g:any('torch/distributed/'in f[0]for f in g['frames'])
 anywait=any(map(waits,out))
 for g in out:
  tie=not(len(g['ranks'])<sizes[0]if sizes[0]>sizes[1]else anywait and not waits(g))
  g['differs']=not g['frames']or not tie
 return sorted(out,key=lambda g:(not g['differs'],len(g['ranks']),min(g['ranks'])))


def group_line(g):
 if not g['frames']:
  return f"{rank_spans(g['ranks'])}: {g['why']}"
 path,_,line=g['where'].rpartition(':')
 odd=(' (the one that differs)'if len(g['ranks'])==1 else' (differs)')if g['differs']else''
 return f"{rank_spans(g['ranks'])}: {g['what']} at {os.path.basename(path)}:{line}{odd}"


class Hang:


 def __init__(self):
  self.timeout,self.home,self.armed,self.told=0.0,'',False,0.0
  self.last=self.reported=self.next_poll=0.0
  self.files:dict={}
  self.steps:dict={}
  self.nodes:dict={}
  self.remote:dict={}
  self.stacked:set=set()

 def configure(self,env,problems):
  raw=(env.get('KGEN_HANG_TIMEOUT')or'0').strip()
  try:
   self.timeout=float(raw)
   assert self.timeout==0 or 1<=self.timeout<math.inf
  except(ValueError,AssertionError):
   self.timeout=0.0
   problems.append(
    f'KGEN_HANG_TIMEOUT={raw!r} is not 0 or a number of seconds >= 1: set values hang.timeout to the '
    f'seconds without progress after which the run is a hang (e.g. 600), or 0 (off)'
   )
  return self.timeout

 def worker_env(self,env):

  self.armed,self.last,self.files,self.steps,self.nodes=bool(self.timeout),time.monotonic(),{},{},{}
  home=hang_home(env)
  self.home=home if all(_private_dir(os.path.join(home,d))for d in('','py','stacks','progress'))else''
  if not self.home or(env.get('KGEN_STACKS')or'').strip().lower()in('0','off','false','no'):
   self.home=''
   return{}
  for sub in('stacks','progress'):
   for name in os.listdir(os.path.join(home,sub)):
    try:
     os.unlink(os.path.join(home,sub,name))
    except OSError:
     pass
  with open(os.path.join(home,'py','sitecustomize.tmp'),'w')as fh:
   fh.write(SITECUSTOMIZE)
  os.replace(os.path.join(home,'py','sitecustomize.tmp'),os.path.join(home,'py','sitecustomize.py'))
  path=os.path.join(home,'py')+(os.pathsep+env['PYTHONPATH']if env.get('PYTHONPATH')else'')
  return{'KGEN_HANG_DIR':home,'KGEN_STACKS_SIGNAL':str(int(STACKS_SIGNAL)),'PYTHONPATH':path}

 def saw(self,prefix):
  self.last=time.monotonic()

 def poll(self,now):

  if now<self.next_poll or not self.home:
   return
  self.next_poll=now+HANG_POLL
  try:
   for e in os.scandir(os.path.join(self.home,'progress')):
    key=(e.stat().st_mtime_ns,e.stat().st_size)
    if self.files.get(e.name)!=key and e.name.isdigit():
     self.files[e.name],self.last=key,now
     with open(e.path,'rb')as fh:
      self.steps[int(e.name)]=printable(fh.read(40).decode('utf-8','replace').strip())
  except OSError:
   pass

 def report(self,spoke,now):

  if self.armed:
   self.poll(now)
   if self.last>self.reported and now-self.told>=HANG_POLL:
    spoke.conn.send({'t':MSG_PROGRESS})
    self.reported,self.told=self.last,now

 def silent(self,now):
  return now-max([self.last,*self.nodes.values()])

 def due(self,now):

  if self.armed:
   self.poll(now)
  return self.armed and self.silent(now)>=self.timeout

 def from_node(self,node,msg):
  if msg['t']==MSG_PROGRESS:
   self.nodes[node]=time.monotonic()
  elif msg['t']==MSG_STACKS:
   self.remote[msg['rank']]=msg
  else:
   self.stacked.add(node)

 def local(self):

  stacks=collect_stacks(self.home)if self.home else[]
  for s in stacks:
   log(f"stack of rank {s['rank']} (pid {s['pid']}, {s['threads']} thread(s)): {s['what']} at {s['where']}")
   for f in s['frames']:
    log(f'  {f[0]}:{f[1]} in {f[2]}')
  return stacks

 def cleanup(self):

  if self.home and not os.environ.get('KGEN_RUN_DIR'):
   import shutil

   shutil.rmtree(self.home,ignore_errors=True)

 def dump_for(self,spoke):

  log("node 0 found no progress for the hang timeout: sending this node's stacks")
  for s in self.local():
   frames=[[shown(f[0],500),f[1],shown(f[2],100)]for f in s['frames']]
   wire={k:shown(s[k],600)for k in('what','where','why')}|{'step':self.steps.get(s['rank'],'')}
   spoke.conn.send({'t':MSG_STACKS,'rank':s['rank'],'pid':s['pid'],'frames':frames,**wire})
  spoke.conn.send({'t':MSG_STACKED})
  spoke.conn.flush(1.0)


HANG=Hang()


def end_hang(cfg,child,hub=None,sigs=None):


 silent,HANG.armed,HANG.remote,HANG.stacked=HANG.silent(time.monotonic()),False,{},set()
 log(
  f"no rank made progress for {silent:.1f}s (KGEN_HANG_TIMEOUT={HANG.timeout:g}s): collecting every rank's stacks"
 )
 for conn in list(hub.peers.values())if hub else[]:
  conn.send({'t':MSG_DUMP})
 stacks,deadline=HANG.local(),time.monotonic()+STACKS_WAIT
 while hub and sigs and not set(hub.peers)<=HANG.stacked and time.monotonic()<deadline and not sigs.pending:
  poll(hub.sel,sigs,hub)
  hub.tick(time.monotonic())
 groups=group_stacks(stacks+list(HANG.remote.values()),cfg.world_size)
 steps={r:m['step']for r,m in HANG.remote.items()if m['step']}|HANG.steps
 lead=next((g for g in groups if g['differs']and g['frames']),groups[0])
 report={'timeout':HANG.timeout,'silent':round(silent,1),'world':cfg.world_size,'time':_utc_stamp(),
     'headline':f'no rank made progress for {silent:.0f}s; {group_line(lead)}','steps':steps,
     'groups':[dict(g,frames=g['frames'][:8])for g in groups]}
 log(f"HANG: {report['headline']}")
 for g in groups:
  log(f'hang report: {group_line(g)}')
 if steps:
  log('hang report: last steps reported: '+', '.join(f'rank {k}: {v}'for k,v in sorted(steps.items())))
 emit(sys.stderr,f'{HANG_MARK}{json.dumps(report, sort_keys=True)}\n')
 if hub is not None:
  hub.end(EXIT_HANG,f"hang: {report['headline']}")
 child.kill_tree(ABORT_GRACE)
 return Stop(EXIT_HANG,f"hang: {report['headline']}")


def stacks_answer(home):

 stacks=collect_stacks(home)
 note=''if stacks else f'no training process of this node registered for stacks in {home}'
 return{'host':socket.gethostname(),'ranks':[dict(s,text=s['text'][-65536:])for s in stacks],'note':note}
























HEALTH_MARK='kgen-entrypoint: health: '
EXIT_HEALTH=78
HEALTH_SLOW,HEALTH_FLOOR_MS,HEALTH_LINK_MS,HEALTH_WAIT=5.0,20.0,100.0,10.0
HEALTH_PHASES=('store','process group','all-reduce','ping-pongs','end')
HEALTH_WORKER=r"""import json, os, subprocess, threading, time
from datetime import timedelta
import torch, torch.distributed as dist
c = json.loads(os.environ["KGEN_HEALTH"]); R, N, T = c["rank"], c["world"], c["timeout"]; t0 = time.monotonic()
left = lambda: timedelta(seconds=max(1, T - 1 - time.monotonic() + t0))
def out(d):
    print(json.dumps(d), flush=True); os._exit(0)
def late():
    time.sleep(left().total_seconds())
    try:
        s = dist.TCPStore(c["addr"], c["port"], N, False, timedelta(seconds=2))
        out({"reached": [sum(s.check([k + str(r)]) for k in ("up", "pg", "ar", "pp")) for r in range(N)]})
    except Exception as e:
        out({"error": f"no answer within {T:g}s, node 0's store neither ({str(e)[:200]})"})
threading.Thread(target=late, daemon=True).start()
try:
    cuda = torch.cuda.is_available(); need, dev = c["gpus"] or cuda * c["nproc"], ""
    if (torch.cuda.device_count() if cuda else 0) < need:
        dev = f"{torch.cuda.device_count() if cuda else 0} GPU(s) visible, {need} expected"
    try:
        q = need and subprocess.run(["nvidia-smi", "--query-gpu=index,ecc.errors.uncorrected.volatile.total",
                                          "--format=csv,noheader"], capture_output=True, text=True, timeout=10)
        ecc = [r.split(",")[0] for r in q.stdout.splitlines() if r.split(",")[-1].strip().lstrip("0").isdigit()]
        dev = dev or (f"nvidia-smi exit {q.returncode}" if q.returncode else ecc and f"ECC errors: GPU {ecc}" or "")
    except (OSError, AttributeError):
        pass
    d, sync = (torch.device("cuda", 0), torch.cuda.synchronize) if cuda else (torch.device("cpu"), lambda: None)
    s = dist.TCPStore(c["addr"], c["port"], N, R == 0, timedelta(seconds=T), wait_for_workers=False)
    s.set(f"up{R}", dev)
    dist.init_process_group("nccl" if cuda else "gloo", store=dist.PrefixStore("pg", s), rank=R, world_size=N,
                            timeout=timedelta(seconds=T))
    s.set(f"pg{R}", "")
    x, times = torch.empty(c["mb"] << 18, device=d), []
    while len(times) < 3:
        x.fill_(1.0); sync(); t = time.monotonic(); dist.all_reduce(x); sync(); times.append(time.monotonic() - t)
        if x[0].item() != N or x[-1].item() != N:
            raise RuntimeError(f"all-reduce sum {x[0].item()}, not {N}")
        spent = torch.tensor([sum(times)], dtype=torch.float64, device=d); dist.all_reduce(spent, op=dist.ReduceOp.MAX)
        if spent.item() > 1:
            break
    s.set(f"ar{R}", str(min(times) * 1e3))
    M, y, pp = N + N % 2, torch.ones(c["kb"] << 8, device=d), {}
    for rnd in range(M - 1):  # round-robin pairs: a fixed, the others turn
        ring = [0] + [1 + (k + rnd) % (M - 1) for k in range(M - 1)]
        p = ring[M - 1 - ring.index(R)]
        for _ in range(3 * (p < N)):
            t = time.monotonic()
            for op in (dist.send, dist.recv) if R < p else (dist.recv, dist.send):
                op(y, p)
            sync(); pp[p] = min(pp.get(p, 1e9), (time.monotonic() - t) * 1e3)
    s.set(f"pp{R}", json.dumps(pp))
    s.wait([f"pp{r}" for r in range(N)], left())
    res = {"up": [s.get(f"up{r}").decode() for r in range(N)], "ar": [float(s.get(f"ar{r}")) for r in range(N)],
           "pp": [json.loads(s.get(f"pp{r}")) for r in range(N)]}
    s.set(f"done{R}", "")
    if R == 0:
        s.wait([f"done{r}" for r in range(N)], left())
    out(res)
except Exception as e:
    out({"error": f"{type(e).__name__}: {str(e)[:300]}"})
"""


def _median(v):
 v=sorted(v)
 return(v[(len(v)-1)//2]+v[len(v)//2])/2 if v else 0.0


def health_verdict(res,n,timeout):

 if'reached'in res:
  got,low=res['reached'],min(res['reached'])
  lines=[f'node {r}: no answer within {timeout:g}s (stuck in the {HEALTH_PHASES[k]})'if k==low
     else f'node {r}: got past the {HEALTH_PHASES[k - 1]}'for r,k in enumerate(got)]
  return lines,[r for r,k in enumerate(got)if k==low]
 if'error'in res:
  return[f"node {r}: the gate failed: {res['error']}"for r in range(n)],list(range(n))
 links={(r,int(p)):t for r,pp in enumerate(res['pp'])for p,t in pp.items()if r<int(p)}
 mine={r:[t for k,t in links.items()if r in k]for r in range(n)}
 base=_median([min(v)for v in mine.values()if v])
 slow={k for k,t in links.items()if t>HEALTH_LINK_MS or t>HEALTH_SLOW*base and t-base>HEALTH_FLOOR_MS}
 nodes={r for r in range(n)if n>2 and all(k in slow for k in links if r in k)}
 nodes=nodes if len(nodes)<n else set()
 lines,bad=[],[]
 for r in range(n):
  to=[k[0]+k[1]-r for k in sorted(slow)if r in k and(r in nodes or not nodes&set(k))]
  worst,names=max([links[(min(r,o),max(r,o))]for o in to]or[0]),', '.join(map(str,to))
  if res['up'][r]:
   lines.append(f"node {r}: {res['up'][r]}")
  elif r in nodes:
   best=min(mine[r])
   lines.append(f'node {r}: {best / max(base, 1e-3):.0f}x slower than the median '
       f'(links to nodes {names}: {best:.1f}-{worst:.1f} ms, median {base:.1f} ms)')
  elif to:
   lines.append(f'node {r}: slow link to node {names} ({worst:.1f} ms, median {base:.1f} ms'
       +'; 2 nodes: either end)'*(n==2)+')'*(n>2))
  else:
   fast=[t for k,t in links.items()if r in k and k not in slow]
   lines.append(f"node {r}: ok {_median(fast):.1f} ms (all-reduce {res['ar'][r]:.1f} ms)")
   continue
  bad.append(r)
 return lines,bad


class Health:


 gate,timeout='warn',30.0

 def configure(self,env,problems):
  self.gate=(env.get('KGEN_HEALTH_GATE')or'warn').strip().lower()
  if self.gate not in('off','warn','fail'):
   problems.append(f'KGEN_HEALTH_GATE={self.gate!r} is not off, warn or fail: set values health.gate')
  self.timeout=_number(env,'KGEN_HEALTH_TIMEOUT',problems,float,30.0,5,fix='seconds, e.g. 30')
  return self.gate

 def run(self,cfg,sigs,link,gen):

  if self.gate=='off'or gen or cfg.nnodes<2:
   return None
  import tempfile

  gpus=cfg.nproc if(os.environ.get('NVIDIA_VISIBLE_DEVICES')or'all')not in('all','void','none')else 0
  spec={'rank':cfg.node_rank,'world':cfg.nnodes,'addr':cfg.master_addr,'port':cfg.master_port,
    'timeout':self.timeout,'mb':4,'kb':256,'gpus':gpus,'nproc':cfg.nproc}
  log(f'health gate ({self.gate}): all-reduce, ping-pongs; KGEN_HEALTH_TIMEOUT={self.timeout:g}s')
  t0,stop=(
   time.monotonic(),
   lambda:sigs.pending or any(getattr(link,a,None)for a in('verdict','lost','stop_host')),
  )
  with tempfile.TemporaryFile()as out:
   proc=subprocess.Popen([sys.executable,'-c',HEALTH_WORKER],stdout=out,stderr=subprocess.STDOUT,
         env=dict(os.environ,KGEN_HEALTH=json.dumps(spec)),start_new_session=True,
         preexec_fn=_torchrun_dies_with_us)
   while proc.poll()is None and time.monotonic()-t0<self.timeout+5 and not stop():
    poll(link.sel,sigs,link)
    link.tick(time.monotonic())
   if proc.poll()is None:
    os.killpg(proc.pid,signal.SIGKILL)
   proc.wait()
   out.seek(0)
   text=out.read().decode('utf-8','replace').strip().splitlines()or['']
  if stop():
   v:tuple=getattr(link,'verdict',None)or('',)
   if v[0]!='end':
    return None
   link.close()
   return Stop(v[1],f'node 0 ended the run ({v[-1]})')
  try:
   res=json.loads(text[-1])
  except ValueError:
   res={'error':f"node {cfg.node_rank}'s worker exit {proc.returncode}: {printable(text[-1])[-300:]}"}
  lines,bad=health_verdict(res,cfg.nnodes,self.timeout)
  took=time.monotonic()-t0
  me=cfg.node_rank or 0
  for line in lines if cfg.is_master else lines[me:me+1]:
   log(f'kgen health: {line}')
  if cfg.is_master:
   emit(sys.stderr,HEALTH_MARK+json.dumps({'gate':self.gate,'lines':lines,'bad':bad})+'\n')
  reason='health gate: '+'; '.join(lines[r]for r in bad)
  log(f'health gate passed in {took:.1f}s'if not bad else f'{reason} (health.gate {self.gate})')
  if not bad or self.gate=='warn':
   return None
  if cfg.is_master:
   link.end(EXIT_HEALTH,reason,bad[0])
   return Stop(EXIT_HEALTH,reason)
  end=time.monotonic()+HEALTH_WAIT
  while link.verdict is None and time.monotonic()<end and not sigs.pending:
   poll(link.sel,sigs,link)
   link.tick(time.monotonic())
  if link.verdict and link.verdict[0]!='end':
   return None
  link.close()
  return Stop(EXIT_HEALTH,reason)


HEALTH=Health()


































SLURM_PORT_BASE,SLURM_PORT_PAIRS=20000,5000
SLURM_REQUEUE_CODES=(EXIT_PEER_LOST,EXIT_DROPPED,128+9,128+15)
HOSTLIST_MAX=65536


def hostlist(text):



 parts,depth,start=[],0,0
 for i,c in enumerate(text):
  if c=='[':
   depth+=1
  elif c==']':
   depth-=1
  elif c==','and depth==0:
   parts.append(text[start:i])
   start=i+1
  if depth not in(0,1):
   raise ValueError(f'unbalanced brackets in host list {text!r}')
 if depth:
  raise ValueError(f'unbalanced brackets in host list {text!r}')
 parts.append(text[start:])
 names:list[str]=[]
 for part in parts:
  part=part.strip()
  if not part:
   continue
  names.extend(_hostlist_part(part,HOSTLIST_MAX-len(names)))
 return names


def _hostlist_part(part,room):
 m=re.fullmatch(r'([^\[\]]*)\[([^\[\]]*)\](.*)',part)
 if not m:
  if'['in part or']'in part or any(c.isspace()for c in part):
   raise ValueError(f'bad host name {part!r}')
  return[part]
 prefix,ranges,rest=m.groups()
 tails=_hostlist_part(rest,room)if rest else['']
 out:list[str]=[]
 for item in ranges.split(','):
  lo,sep,hi=item.strip().partition('-')
  if not lo.isdigit()or(sep and not hi.isdigit()):
   raise ValueError(f'bad range {item!r} in host list {part!r}')
  first,last=int(lo),int(hi)if sep else int(lo)
  if last<first or(last-first+1)*len(tails)>room-len(out):
   raise ValueError(f'range {item!r} in {part!r} is reversed or longer than {HOSTLIST_MAX} names')
  out.extend(f'{prefix}{str(k).zfill(len(lo))}{t}'for k in range(first,last+1)for t in tails)
 return out


def slurm_port(job):

 try:
  key=int(job)
 except ValueError:
  key=sum(job.encode())*7919
 return SLURM_PORT_BASE+2*(key%SLURM_PORT_PAIRS)


def slurm_environment(env,cfg):



 job=_raw(env,'SLURM_JOB_ID')or _raw(env,'SLURM_JOBID')
 if job is None or _raw(env,'KGEN_SLURM')=='0':
  return env
 p=cfg.problems
 step=_raw(env,'SLURM_STEP_ID')or _raw(env,'SLURM_STEPID')
 if step is None:
  if _raw(env,'NODE_RANK')is None and(_raw(env,'SLURM_NNODES')or'1')!='1':
   p.append(
    f'this is the batch script (or allocation) of Slurm job {job}, not a job step (no SLURM_STEP_ID): '
    'start the entrypoint with srun, one task per node (srun --ntasks-per-node=1 '
    '--ntasks="$SLURM_NNODES" ...), or it runs on the batch host alone as node 0'
   )
  return env
 if _raw(env,'NNODES')is not None and _raw(env,'NODE_RANK')is not None:
  return env
 out=dict(env)

 def count(*names):
  for name in names:
   raw=_raw(env,name)
   if raw is not None:
    if raw.isdigit():
     return int(raw)
    p.append(f"{name}={raw!r} is not a number: this is not a Slurm job step's environment")
    return None
  return None

 nodes=count('SLURM_STEP_NUM_NODES','SLURM_NNODES','SLURM_JOB_NUM_NODES')
 tasks=count('SLURM_STEP_NUM_TASKS','SLURM_NTASKS')
 node_id=count('SLURM_NODEID')
 restart=count('SLURM_RESTART_COUNT')or 0
 if nodes is None or node_id is None:
  p.append('SLURM_STEP_NUM_NODES and SLURM_NODEID are not set in this Slurm job step: start it with srun')
  return env
 if tasks is not None and tasks!=nodes:
  p.append(
   f'Slurm job step with {tasks} tasks on {nodes} node(s) (SLURM_STEP_NUM_TASKS): kgen runs one task per '
   'node, torchrun starts the per-GPU processes: srun --ntasks-per-node=1 --ntasks="$SLURM_NNODES"'
  )
 for name,value in(('NNODES',nodes),('NODE_RANK',node_id)):
  given=_raw(env,name)
  if given is not None and given!=str(value):
   origin='SLURM_STEP_NUM_NODES'if name=='NNODES'else'SLURM_NODEID'
   p.append(
    f'{name}={given} but the Slurm step says {value} ({origin}): unset {name}, kgen takes it from Slurm'
   )
  out[name]=str(value)
 listed=_raw(env,'SLURM_STEP_NODELIST')or _raw(env,'SLURM_JOB_NODELIST')or _raw(env,'SLURM_NODELIST')or''
 addr=_raw(env,'MASTER_ADDR')
 if addr is None:
  try:
   hosts=hostlist(listed)
  except ValueError as exc:
   hosts=[]
   p.append(f"SLURM_STEP_NODELIST={listed!r}: {exc}: set MASTER_ADDR to node 0's host")
  if hosts:
   out['MASTER_ADDR']=addr=hosts[0]
  elif listed=='':
   p.append("SLURM_STEP_NODELIST is not set: set MASTER_ADDR to node 0's host")
 if _raw(env,'MASTER_PORT')is None:
  out['MASTER_PORT']=str(slurm_port(job))
 if _raw(env,'KGEN_RUN_ID')is None:
  out['KGEN_RUN_ID']=job
 if _raw(env,'KGEN_JOB_NAME')is None and _raw(env,'SLURM_JOB_NAME'):
  out['KGEN_JOB_NAME']=re.sub(r'[^A-Za-z0-9_.-]','-',_raw(env,'SLURM_JOB_NAME')or'')[:63]
 if _raw(env,'KGEN_RESTART_ATTEMPT')is None:
  out['KGEN_RESTART_ATTEMPT']=str(restart)
 cfg.restart_base=restart
 cfg.slurm={'job':job,'step':step,'nodes':nodes,'restart':restart,'nodelist':listed}
 port_from=' (from the job id)'if _raw(env,'MASTER_PORT')is None else''
 cfg.notes.append(
  f'Slurm job {job} step {step}: {nodes} node(s) (SLURM_STEP_NUM_NODES), node rank from SLURM_NODEID, '
  f"MASTER_ADDR {addr} (first host of {listed or '?'}), MASTER_PORT {out.get('MASTER_PORT')}{port_from}, "
  f'restart {restart} (SLURM_RESTART_COUNT)'
 )
 return out


def slurm_decide(cfg,fault):

 if fault=='script'and cfg.on_script_error=='fail':
  return FAIL,EXIT_RUN_FAILED,'a training script failed (KGEN_ON_SCRIPT_ERROR=fail)'
 return FAIL,EXIT_PEER_LOST,'the Slurm step ends; the job is requeued and resumes from the checkpoint'











USAGE=(
 'usage: kgen_entrypoint.py [--diagnose | --smoke-test | --stop | -- COMMAND [ARGS...]]\n'
 '  -- train.py ARGS      run a script on every worker through torchrun\n'
 '  -- -m pkg.mod ARGS    run a module\n'
 '  -- PROGRAM ARGS       run any program (torchrun --no-python)\n'
 '  --smoke-test          all-reduce check instead of training\n'
 '  --diagnose            environment and network checks, one PASS/FAIL line each\n'
 "  --stop                stop the whole group (with the run's environment, on any host)\n"
 "  --stacks              this node's training processes' Python stacks, one JSON line\n"
 'bare metal (kgen launch; docs/baremetal.md):\n'
 '  --run-dir DIR --detach -- COMMAND   start this node detached (DIR/env: its environment, JSON)\n'
 "  --run-dir DIR --state               the node's run state, one JSON line\n"
 '  --run-dir DIR --log [--tail N] [--follow]\n'
 '  --run-dir DIR --stop-node [--grace S] [--interrupt]   end every process of the node\n'
 "  --run-dir DIR --stacks              the node's training processes' Python stacks, one JSON line\n"
 'slurm (docs/slurm.md):\n'
 '  --slurm-node RUN -- COMMAND   this node of the job step (srun, one task per node)\n'
 '  --slurm-end RUN RC            after srun: succeeded, failed, stopped, or requeue the job\n'
)


def main(argv=None):

 try:
  code=_main(argv)
 except Stop as stop:
  _said_dropped()
  emit(sys.stderr,f'kgen-entrypoint: stopped: {printable(stop.reason)}\n')
  return stop.code
 except Exception as exc:
  emit(sys.stderr,f'kgen-entrypoint: stopped: {internal_error(exc)}\n')
  return EXIT_INTERNAL
 _said_dropped()
 return code


def _said_dropped():
 if DROPPED[0]:
  log(f"{DROPPED[0]} line(s) of this node's output could not be written (a full or failing disk?)")


def _main(argv=None):
 global _TAG
 args=list(sys.argv[1:]if argv is None else argv)
 if args[:1]==['--smoke-worker']:
  return smoke_worker()
 parent=os.environ.get(SUPERVISOR_PID,'')
 if parent.isdigit():
  die_with_parent(signal.SIGTERM,int(parent))
 verbs={'--launch-node':'launch_node','--run-dir':'run_dir_verb','--slurm-node':'slurm_node'}
 verbs['--slurm-end']='slurm_end'
 if args and args[0]in verbs and verbs[args[0]]not in globals():
  fatal(
   EXIT_CONFIG,
   f'{args[0]} is for bare metal or Slurm: this is the pod copy kgen render ships, without that '
   'section; `kgen entrypoint` prints the whole file',
  )
 if args[:1]==['--launch-node']:
  return launch_node(globals().get('KGEN_SOURCE'))
 if args[:1]==['--run-dir']:
  return run_dir_verb(args[1:])
 if args[:1]==['--slurm-node']:
  return slurm_node(args[1:])
 if args[:1]==['--slurm-end']:
  return slurm_end(args[1:])
 if args[:1]in(['-h'],['--help']):
  sys.stdout.write(USAGE)
  return 0
 if args[:1]==['--diagnose']:
  if len(args)>1:
   fatal(EXIT_CONFIG,'--diagnose takes no arguments')
  return diagnose(dict(os.environ))
 if args[:1]==['--stacks']:
  print(json.dumps(stacks_answer(hang_home(dict(os.environ)))),flush=True)
  return 0
 if args[:1]==['--stop']:
  if len(args)>1:
   fatal(EXIT_CONFIG,'--stop takes no arguments')
  return request_stop(dict(os.environ))
 if args[:1]==['--smoke-test']:
  if len(args)>1:
   fatal(EXIT_CONFIG,'--smoke-test takes no arguments')
  command=[script_path(),'--smoke-worker']
 elif args[:1]==['--']:
  command=args[1:]
  check_command(command)
 elif args and not args[0].startswith('-'):
  command=args
  check_command(command)
 else:
  sys.stderr.write(USAGE)
  fatal(EXIT_CONFIG,f'unknown option {args[0]!r}'if args else'no command given')
 cfg=load_config(dict(os.environ))
 if cfg.problems:
  fatal(EXIT_CONFIG,cfg.problems)
 _TAG=f'kgen node {cfg.node_rank}'
 log(cfg.summary())
 for note in cfg.notes:
  log(f'note: {note}')
 return run(cfg,command)



if __name__=='__main__':
 sys.exit(main())
