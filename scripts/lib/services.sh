# shellcheck shell=bash
#
# scripts/lib/services.sh: the PostgreSQL and Redis plumbing shared by
# scripts/dev-up and scripts/test. Source it from bash; it does nothing by
# itself.
#
# What it offers:
#   funduq_pg_reachable URL / funduq_redis_reachable URL
#       true when a server answers at URL (installs psql / redis-cli if absent);
#       FUNDUQ_PG_REFUSAL: what a PostgreSQL that answered refused
#   funduq_pg_start_local / funduq_redis_start_local
#       start (or reuse) a project-local server under $FUNDUQ_STATE_DIR
#   funduq_stop_started
#       stop the servers that THIS shell started, by pidfile, never by name
#   funduq_stop_state_dir
#       stop whatever local servers run from $FUNDUQ_STATE_DIR (dev-up --stop)
#   funduq_chromium_ensure
#       find (or install Debian's) chromium for the browser tests and export
#       its path as FUNDUQ_TEST_CHROMIUM
#
# Environment it reads:
#   FUNDUQ_STATE_DIR       local state (default <repo>/.funduq)
#   FUNDUQ_DEV_PG_PORT     port of the project-local PostgreSQL (default 25432)
#   FUNDUQ_DEV_REDIS_PORT  port of the project-local Redis (default 25379)
#   FUNDUQ_PG_BINDIR       PostgreSQL server binaries (default: the newest
#                          /usr/lib/postgresql/<ver>/bin)
#
# Layout under the state folder:
#   pg/           PostgreSQL data folder (owned by the postgres OS user when root)
#   pg-run/       PostgreSQL's unix socket
#   redis/        Redis working folder and redis.pid
#   logs/         postgres.log, redis.log, initdb.log (and dev-up's programs)
#
# Everything it reports goes to stderr with a "[funduq]" prefix. Note for
# callers: dev-up's tests look for a line starting with "[funduq] ready:", so
# nothing here prints a message that starts with "ready".

FUNDUQ_REPO_ROOT=$(cd -P -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd -P)

# Set to 1 by the start functions when this shell started the server (as
# opposed to reusing one), and read by funduq_stop_started.
FUNDUQ_STARTED_PG=0
FUNDUQ_STARTED_REDIS=0
# The pid of the server this shell started, so that stopping never touches a
# different process that happens to run from the same folder later on.
FUNDUQ_PG_PID=
FUNDUQ_REDIS_PID=

funduq_log() { printf '[funduq] %s\n' "$*" >&2; }

funduq_die() {
	funduq_log "error: $*"
	exit 1
}

funduq_is_root() { [ "$(id -u)" -eq 0 ]; }

# funduq_redact URL: the URL with any password replaced by ***.
funduq_redact() { printf '%s' "$1" | sed -E 's#(://[^:/@]*):[^@/]*@#\1:***@#'; }

# funduq_init_state: make $FUNDUQ_STATE_DIR exist and be absolute and
# symlink-free (the process checks below compare it with /proc/PID/cwd).
funduq_init_state() {
	: "${FUNDUQ_STATE_DIR:=$FUNDUQ_REPO_ROOT/.funduq}"
	mkdir -p -- "$FUNDUQ_STATE_DIR"
	FUNDUQ_STATE_DIR=$(cd -P -- "$FUNDUQ_STATE_DIR" && pwd -P)
	export FUNDUQ_STATE_DIR
	mkdir -p -- "$FUNDUQ_STATE_DIR/logs"

	# Below 32768, outside Linux's default range for outgoing connections
	# (32768-60999): a port in it may be held by any client socket on the
	# machine, with nothing listening, and the server then fails to bind
	# (scripts/ports_test.go).
	: "${FUNDUQ_DEV_PG_PORT:=25432}"
	: "${FUNDUQ_DEV_REDIS_PORT:=25379}"
	[[ $FUNDUQ_DEV_PG_PORT =~ ^[0-9]+$ ]] || funduq_die "FUNDUQ_DEV_PG_PORT is not a port number: $FUNDUQ_DEV_PG_PORT"
	[[ $FUNDUQ_DEV_REDIS_PORT =~ ^[0-9]+$ ]] || funduq_die "FUNDUQ_DEV_REDIS_PORT is not a port number: $FUNDUQ_DEV_REDIS_PORT"
}

# funduq_ensure_go: put the machine's Go (/usr/local/go/bin) on PATH if needed.
funduq_ensure_go() {
	if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
		PATH=/usr/local/go/bin:$PATH
		export PATH
	fi
	command -v go >/dev/null 2>&1 || funduq_die "Go is not installed (expected it in /usr/local/go/bin)"
	# go.mod's toolchain line names the Go patch release we build with (its standard
	# library carries the security fixes govulncheck asks for). Let go fetch it
	# through the module proxy even where the machine defaults to GOTOOLCHAIN=local;
	# FUNDUQ_GOTOOLCHAIN overrides (e.g. local, to build with the machine's Go).
	GOTOOLCHAIN=${FUNDUQ_GOTOOLCHAIN:-auto}
	export GOTOOLCHAIN
}

# ---------------------------------------------------------------------------
# Packages

# funduq_apt_install PKG...: install Debian packages (as root, or via sudo).
funduq_apt_install() {
	local sudo=()
	if ! funduq_is_root; then
		command -v sudo >/dev/null 2>&1 || funduq_die "need root (or sudo) to install: $*"
		sudo=(sudo)
	fi
	command -v apt-get >/dev/null 2>&1 || funduq_die "apt-get not found; install by hand: $*"
	funduq_log "installing Debian packages: $*"
	# apt's chatter goes to stderr so that stdout stays clean for callers.
	if ! { "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
		"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"; } >&2; then
		funduq_die "could not install: $*"
	fi
}

# funduq_need_cmd CMD PKG: make sure CMD is on PATH, installing PKG if not.
funduq_need_cmd() {
	command -v "$1" >/dev/null 2>&1 && return 0
	funduq_apt_install "$2"
	command -v "$1" >/dev/null 2>&1 || funduq_die "$1 is still missing after installing $2"
}

# funduq_chromium_ensure: export FUNDUQ_TEST_CHROMIUM, the headless Chromium
# the browser tests drive (core/browsertest): the one already named there,
# else chromium on PATH, else Debian's chromium, installed now (with
# fonts-liberation, so pages render text). An install that fails is only a
# warning: the browser tests then skip, or fail under CI=true.
funduq_chromium_ensure() {
	local name
	if [ -n "${FUNDUQ_TEST_CHROMIUM:-}" ] && [ -x "$FUNDUQ_TEST_CHROMIUM" ]; then
		export FUNDUQ_TEST_CHROMIUM
		return 0
	fi
	for _ in 1 2; do
		for name in chromium chromium-browser; do
			if command -v "$name" >/dev/null 2>&1; then
				FUNDUQ_TEST_CHROMIUM=$(command -v "$name")
				export FUNDUQ_TEST_CHROMIUM
				return 0
			fi
		done
		# A subshell, so that a failed install (funduq_die) ends only it.
		(funduq_apt_install chromium fonts-liberation) || break
	done
	funduq_log "warning: no chromium, and installing Debian's chromium failed: the browser tests will skip (and fail under CI=true)"
	unset FUNDUQ_TEST_CHROMIUM
	return 0
}

# ---------------------------------------------------------------------------
# Small process and network helpers

# funduq_pid_alive PID: true while PID runs (a zombie does not count: PID 1
# in some containers never reaps the daemons that were reparented to it).
funduq_pid_alive() {
	local stat
	[[ ${1:-} =~ ^[0-9]+$ ]] || return 1
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) } # the state letter follows the parenthesised command name
	[ "${stat%% *}" != Z ]
}

# funduq_proc_in_dir PID DIR: true when PID runs with DIR as its working
# directory. Both postgres and redis-server chdir into their data folder, so
# this tells "our" server from an unrelated process that reuses an old pid.
funduq_proc_in_dir() {
	local cwd
	funduq_pid_alive "$1" || return 1
	cwd=$(readlink "/proc/$1/cwd" 2>/dev/null) || return 1
	[ "$cwd" = "$2" ]
}

# funduq_wait_pid_gone PID SECONDS: wait until PID has exited.
funduq_wait_pid_gone() {
	local n=$(($2 * 10))
	while funduq_pid_alive "$1"; do
		[ "$n" -gt 0 ] || return 1
		n=$((n - 1))
		sleep 0.1
	done
}

# funduq_tcp_open HOST PORT: true when something accepts connections there.
funduq_tcp_open() {
	# The subshell opens and, on exit, closes the connection.
	(exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
}

# funduq_show_log FILE: the end of a log, to explain a failure.
funduq_show_log() {
	[ -s "$1" ] || return 0
	funduq_log "last lines of $1:"
	tail -n 25 -- "$1" | sed 's/^/    /' >&2
}

# ---------------------------------------------------------------------------
# Reachability

# funduq_pg_reachable URL: true when PostgreSQL at URL accepts a query.
# Otherwise FUNDUQ_PG_REFUSAL holds the server's own refusal (psql's FATAL
# line: no such database or role, authentication) when a server answered,
# and is empty when none did.
funduq_pg_reachable() {
	funduq_need_cmd psql postgresql-client
	local out errfile
	FUNDUQ_PG_REFUSAL=
	errfile=$(mktemp)
	# -w: never prompt for a password (a server that wants one refuses).
	if ! out=$(PGCONNECT_TIMEOUT=5 psql -X -w -At -d "$1" -c 'select 1' 2>"$errfile"); then
		FUNDUQ_PG_REFUSAL=$(sed -n 's/.*FATAL: *//p' "$errfile" | head -n 1)
		rm -f -- "$errfile"
		return 1
	fi
	rm -f -- "$errfile"
	[ "$out" = 1 ]
}

# funduq_redis_reachable URL: true when Redis at URL answers PING.
funduq_redis_reachable() {
	funduq_need_cmd redis-cli redis-tools
	local out
	out=$(timeout 5 redis-cli --no-auth-warning -u "$1" ping 2>/dev/null) || return 1
	[ "$out" = PONG ]
}

# ---------------------------------------------------------------------------
# Project-local PostgreSQL

# funduq_pg_find_bindir: set FUNDUQ_PG_BINDIR to a folder holding initdb,
# pg_ctl and postgres, installing Debian's postgresql if there is none.
funduq_pg_find_bindir() {
	local initdb
	if [ -n "${FUNDUQ_PG_BINDIR:-}" ]; then
		[ -x "$FUNDUQ_PG_BINDIR/initdb" ] || funduq_die "no initdb in FUNDUQ_PG_BINDIR=$FUNDUQ_PG_BINDIR"
		return 0
	fi
	for _ in 1 2; do
		# Debian keeps the server binaries off PATH, one folder per major version.
		initdb=$(printf '%s\n' /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n 1)
		if [ -x "$initdb" ]; then
			FUNDUQ_PG_BINDIR=${initdb%/initdb}
			break
		fi
		# Elsewhere initdb may simply be on PATH.
		if initdb=$(command -v initdb 2>/dev/null); then
			FUNDUQ_PG_BINDIR=$(dirname -- "$(readlink -f -- "$initdb")")
			break
		fi
		funduq_apt_install postgresql
	done
	[ -n "${FUNDUQ_PG_BINDIR:-}" ] || funduq_die "PostgreSQL server binaries not found after installing postgresql"
	funduq_need_cmd psql postgresql-client
	funduq_need_cmd pg_isready postgresql-client
}

# funduq_as_pg CMD...: run CMD as the postgres OS user when we are root
# (initdb and postgres refuse to run as root), from / so that an unreadable
# current directory does not bother it.
funduq_as_pg() {
	if funduq_is_root; then
		(cd / && runuser -u postgres -- "$@")
	else
		"$@"
	fi
}

# funduq_pg_chown PATH...: hand PATH over to the postgres OS user when root.
funduq_pg_chown() {
	if funduq_is_root; then
		chown -R postgres: -- "$@"
	fi
}

# funduq_pg_paths: set FUNDUQ_PG_DATA, FUNDUQ_PG_SOCKDIR and FUNDUQ_PG_LOG.
funduq_pg_paths() {
	local base=$FUNDUQ_STATE_DIR
	FUNDUQ_PG_LOG=$FUNDUQ_STATE_DIR/logs/postgres.log
	if funduq_is_root; then
		if ! id postgres >/dev/null 2>&1; then
			funduq_log "creating the postgres OS user"
			useradd --system --user-group --home-dir /var/lib/postgresql --shell /bin/bash postgres
		fi
		# The server runs as postgres, so it must be able to walk down to its
		# folder. A state folder under a private parent (say /root) cannot
		# hold it: keep PostgreSQL's own files in a folder of /tmp named
		# after the state folder instead.
		if ! runuser -u postgres -- test -x "$base"; then
			base=${TMPDIR:-/tmp}/funduq-pg-$(printf '%s' "$FUNDUQ_STATE_DIR" | cksum | cut -d ' ' -f 1)
			mkdir -p -- "$base"
			if [ -L "$base" ] || [ ! -O "$base" ]; then
				funduq_die "$base is not a folder of ours"
			fi
			FUNDUQ_PG_LOG=$base/postgres.log
			funduq_log "the postgres user cannot enter $FUNDUQ_STATE_DIR; keeping PostgreSQL's files in $base"
		fi
	fi
	FUNDUQ_PG_DATA=$base/pg
	FUNDUQ_PG_SOCKDIR=$base/pg-run
}

# funduq_pg_running_pid: print the pid of the postmaster running from our
# data folder; false when none does (no postmaster.pid, or a stale one).
funduq_pg_running_pid() {
	local pidfile=$FUNDUQ_PG_DATA/postmaster.pid pid
	[ -f "$pidfile" ] || return 1
	pid=$(head -n 1 -- "$pidfile" 2>/dev/null) || return 1
	funduq_proc_in_dir "$pid" "$FUNDUQ_PG_DATA" || return 1
	printf '%s\n' "$pid"
}

# funduq_pg_initdb: create the data folder once (trust auth, superuser
# postgres). initdb writes into a scratch folder that is renamed only when
# it succeeded, so a run killed half-way never leaves a broken data folder.
funduq_pg_initdb() {
	local data=$FUNDUQ_PG_DATA tmp=$FUNDUQ_PG_DATA.initdb
	local log=$FUNDUQ_STATE_DIR/logs/initdb.log
	[ -f "$data/PG_VERSION" ] && return 0
	if [ -d "$data" ]; then
		rmdir -- "$data" 2>/dev/null || funduq_die "$data exists but is not a PostgreSQL data folder; move it away"
	fi
	rm -rf -- "$tmp"
	mkdir -p -- "$tmp"
	chmod 0700 "$tmp"
	funduq_pg_chown "$tmp"
	funduq_log "initialising a PostgreSQL data folder in $data (trust auth, superuser postgres)"
	if ! funduq_as_pg "$FUNDUQ_PG_BINDIR/initdb" -D "$tmp" -U postgres --auth=trust \
		--encoding=UTF8 --no-locale --no-sync >"$log" 2>&1; then
		funduq_show_log "$log"
		rm -rf -- "$tmp"
		funduq_die "initdb failed"
	fi
	# Our settings live in funduq.conf, rewritten at every start.
	printf "\ninclude_if_exists = 'funduq.conf'\n" >>"$tmp/postgresql.conf"
	mv -- "$tmp" "$data"
}

# funduq_pg_write_conf PORT: the settings of the local server.
funduq_pg_write_conf() {
	local sock=$FUNDUQ_PG_SOCKDIR
	# A unix socket path may hold at most 107 bytes.
	if [ $((${#sock} + ${#1} + 12)) -gt 107 ]; then
		funduq_log "the socket folder path is too long for a unix socket; PostgreSQL will listen on TCP only"
		sock=
	fi
	cat >"$FUNDUQ_PG_DATA/funduq.conf" <<EOF
# Written by scripts/lib/services.sh at every start: edit the script, not this.
listen_addresses = '127.0.0.1'
port = $1
unix_socket_directories = '${sock//\'/\'\'}'
# A throw-away development and test server: durability buys nothing here.
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 200
EOF
	funduq_pg_chown "$FUNDUQ_PG_DATA/funduq.conf"
}

# funduq_pg_local_dsn PORT DB: a libpq connection string for the local server.
funduq_pg_local_dsn() {
	printf 'host=127.0.0.1 port=%s user=postgres dbname=%s sslmode=disable connect_timeout=5' "$1" "$2"
}

# funduq_pg_ensure_db PORT NAME: create database NAME if it does not exist.
funduq_pg_ensure_db() {
	local dsn out
	dsn=$(funduq_pg_local_dsn "$1" postgres)
	out=$(psql -X -w -At -d "$dsn" -c "select 1 from pg_database where datname = '$2'") ||
		funduq_die "cannot query the local PostgreSQL on port $1"
	[ "$out" = 1 ] && return 0
	funduq_log "creating database $2"
	psql -X -w -q -d "$dsn" -c "create database \"$2\"" >/dev/null ||
		funduq_die "cannot create database $2"
}

# funduq_pg_start_local: make a project-local PostgreSQL run on 127.0.0.1
# port $FUNDUQ_DEV_PG_PORT with a database "funduq", reusing one already
# running from the same state folder.
funduq_pg_start_local() {
	local port=$FUNDUQ_DEV_PG_PORT pid running_port
	funduq_pg_find_bindir
	funduq_pg_paths

	if pid=$(funduq_pg_running_pid); then
		running_port=$(sed -n 4p -- "$FUNDUQ_PG_DATA/postmaster.pid")
		if [ "$running_port" != "$port" ]; then
			funduq_die "a PostgreSQL from $FUNDUQ_PG_DATA already runs on port $running_port (pid $pid), not $port: set FUNDUQ_DEV_PG_PORT=$running_port, or stop it with scripts/dev-up --stop"
		fi
		funduq_log "reusing the PostgreSQL already running from $FUNDUQ_PG_DATA (pid $pid, port $port); this run did not start it and leaves it running"
		funduq_pg_ensure_db "$port" funduq
		return 0
	fi

	# Nothing of ours runs: whatever a killed run left behind is stale.
	if [ -f "$FUNDUQ_PG_DATA/postmaster.pid" ]; then
		funduq_log "removing the stale postmaster.pid of a PostgreSQL that is no longer running"
		rm -f -- "$FUNDUQ_PG_DATA/postmaster.pid"
	fi
	rm -f -- "$FUNDUQ_PG_SOCKDIR"/.s.PGSQL.*
	if funduq_tcp_open 127.0.0.1 "$port"; then
		funduq_die "port $port is taken by another program; choose another with FUNDUQ_DEV_PG_PORT"
	fi

	funduq_pg_initdb
	mkdir -p -- "$FUNDUQ_PG_SOCKDIR"
	touch -- "$FUNDUQ_PG_LOG"
	funduq_pg_chown "$FUNDUQ_PG_SOCKDIR" "$FUNDUQ_PG_LOG"
	funduq_pg_write_conf "$port"

	funduq_log "starting PostgreSQL on 127.0.0.1:$port (data $FUNDUQ_PG_DATA, log $FUNDUQ_PG_LOG)"
	# From here on the server may exist, so our stop function must look for it.
	FUNDUQ_STARTED_PG=1
	# pg_ctl starts the postmaster in a session of its own (so a Ctrl-C in the
	# terminal does not reach it) and -w waits until it accepts connections.
	if ! funduq_as_pg "$FUNDUQ_PG_BINDIR/pg_ctl" start -D "$FUNDUQ_PG_DATA" -l "$FUNDUQ_PG_LOG" -w -t 60 -s >/dev/null; then
		funduq_show_log "$FUNDUQ_PG_LOG"
		funduq_die "PostgreSQL did not start"
	fi
	FUNDUQ_PG_PID=$(funduq_pg_running_pid) || funduq_die "PostgreSQL started but its postmaster.pid is missing"
	funduq_pg_ensure_db "$port" funduq
}

# funduq_pg_stop_local: stop the PostgreSQL this shell started, if any.
funduq_pg_stop_local() {
	local pid
	[ "$FUNDUQ_STARTED_PG" = 1 ] || return 0
	FUNDUQ_STARTED_PG=0
	pid=$(funduq_pg_running_pid) || return 0
	if [ -n "$FUNDUQ_PG_PID" ] && [ "$pid" != "$FUNDUQ_PG_PID" ]; then
		funduq_log "the PostgreSQL running from $FUNDUQ_PG_DATA (pid $pid) is not the one this run started; leaving it"
		return 0
	fi
	funduq_log "stopping PostgreSQL (pid $pid)"
	# pg_ctl finds the server through postmaster.pid; "fast" ends open sessions.
	if ! funduq_as_pg "$FUNDUQ_PG_BINDIR/pg_ctl" stop -D "$FUNDUQ_PG_DATA" -m fast -w -t 60 -s; then
		funduq_log "pg_ctl stop failed; killing pid $pid"
		kill -QUIT "$pid" 2>/dev/null
		funduq_wait_pid_gone "$pid" 10 || kill -KILL "$pid" 2>/dev/null
	fi
	funduq_wait_pid_gone "$pid" 10 || funduq_log "warning: PostgreSQL pid $pid is still running"
}

# ---------------------------------------------------------------------------
# Project-local Redis

funduq_redis_paths() {
	FUNDUQ_REDIS_DIR=$FUNDUQ_STATE_DIR/redis
	FUNDUQ_REDIS_PIDFILE=$FUNDUQ_REDIS_DIR/redis.pid
	FUNDUQ_REDIS_LOG=$FUNDUQ_STATE_DIR/logs/redis.log
}

# funduq_redis_running_pid: print the pid of the redis-server running from
# our folder; false when none does.
funduq_redis_running_pid() {
	local pid
	[ -f "$FUNDUQ_REDIS_PIDFILE" ] || return 1
	pid=$(head -n 1 -- "$FUNDUQ_REDIS_PIDFILE" 2>/dev/null) || return 1
	funduq_proc_in_dir "$pid" "$FUNDUQ_REDIS_DIR" || return 1
	printf '%s\n' "$pid"
}

funduq_redis_ping_local() {
	[ "$(timeout 5 redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null)" = PONG ]
}

# funduq_redis_start_local: make a project-local Redis run on 127.0.0.1 port
# $FUNDUQ_DEV_REDIS_PORT, reusing one already running from the state folder.
funduq_redis_start_local() {
	local port=$FUNDUQ_DEV_REDIS_PORT pid n
	funduq_need_cmd redis-server redis-server
	funduq_need_cmd redis-cli redis-tools
	funduq_redis_paths
	mkdir -p -- "$FUNDUQ_REDIS_DIR"

	if pid=$(funduq_redis_running_pid); then
		funduq_redis_ping_local "$port" ||
			funduq_die "a Redis from $FUNDUQ_REDIS_DIR runs (pid $pid) but does not answer on port $port: set FUNDUQ_DEV_REDIS_PORT to its port, or stop it with scripts/dev-up --stop"
		funduq_log "reusing the Redis already running from $FUNDUQ_REDIS_DIR (pid $pid, port $port); this run did not start it and leaves it running"
		return 0
	fi
	if [ -f "$FUNDUQ_REDIS_PIDFILE" ]; then
		funduq_log "removing the stale pidfile of a Redis that is no longer running"
		rm -f -- "$FUNDUQ_REDIS_PIDFILE"
	fi
	if funduq_tcp_open 127.0.0.1 "$port"; then
		funduq_die "port $port is taken by another program; choose another with FUNDUQ_DEV_REDIS_PORT"
	fi

	funduq_log "starting Redis on 127.0.0.1:$port (folder $FUNDUQ_REDIS_DIR, log $FUNDUQ_REDIS_LOG)"
	FUNDUQ_STARTED_REDIS=1
	# --daemonize detaches it into a session of its own, with stdio on /dev/null.
	redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$FUNDUQ_REDIS_DIR" --daemonize yes --pidfile "$FUNDUQ_REDIS_PIDFILE" \
		--logfile "$FUNDUQ_REDIS_LOG" ||
		funduq_die "redis-server did not start"
	# The pidfile appears once it listens; give it up to 30 s.
	for ((n = 300; n > 0; n--)); do
		if pid=$(funduq_redis_running_pid) && funduq_redis_ping_local "$port"; then
			FUNDUQ_REDIS_PID=$pid
			return 0
		fi
		sleep 0.1
	done
	funduq_show_log "$FUNDUQ_REDIS_LOG"
	funduq_die "Redis did not come up on port $port"
}

# funduq_redis_stop_local: stop the Redis this shell started, if any.
funduq_redis_stop_local() {
	local pid
	[ "$FUNDUQ_STARTED_REDIS" = 1 ] || return 0
	FUNDUQ_STARTED_REDIS=0
	pid=$(funduq_redis_running_pid) || return 0
	if [ -n "$FUNDUQ_REDIS_PID" ] && [ "$pid" != "$FUNDUQ_REDIS_PID" ]; then
		funduq_log "the Redis running from $FUNDUQ_REDIS_DIR (pid $pid) is not the one this run started; leaving it"
		return 0
	fi
	funduq_log "stopping Redis (pid $pid)"
	kill -TERM "$pid" 2>/dev/null
	if ! funduq_wait_pid_gone "$pid" 20; then
		funduq_log "Redis did not stop within 20 s; killing pid $pid"
		kill -KILL "$pid" 2>/dev/null
		funduq_wait_pid_gone "$pid" 5 || funduq_log "warning: Redis pid $pid is still running"
	fi
	rm -f -- "$FUNDUQ_REDIS_PIDFILE"
}

# ---------------------------------------------------------------------------
# Stopping

# funduq_stop_started: stop what this shell started (and only that): Redis,
# then PostgreSQL. Safe to call more than once.
funduq_stop_started() {
	funduq_redis_stop_local
	funduq_pg_stop_local
}

# funduq_stop_state_dir: stop any local server running from
# $FUNDUQ_STATE_DIR, whoever started it (say, a dev-up that was killed).
funduq_stop_state_dir() {
	local stopped=0
	funduq_redis_paths
	if funduq_redis_running_pid >/dev/null; then
		FUNDUQ_STARTED_REDIS=1 FUNDUQ_REDIS_PID=
		funduq_redis_stop_local
		stopped=1
	fi
	# Without server binaries there is no server of ours to stop.
	if [ -n "${FUNDUQ_PG_BINDIR:-}" ] || compgen -G '/usr/lib/postgresql/*/bin/pg_ctl' >/dev/null; then
		funduq_pg_find_bindir
		funduq_pg_paths
		if funduq_pg_running_pid >/dev/null; then
			FUNDUQ_STARTED_PG=1 FUNDUQ_PG_PID=
			funduq_pg_stop_local
			stopped=1
		fi
	fi
	[ "$stopped" = 1 ] || funduq_log "no local PostgreSQL or Redis runs from $FUNDUQ_STATE_DIR"
}
