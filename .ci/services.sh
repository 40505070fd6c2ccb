#!/usr/bin/env bash
# Start the machine's Redis, MariaDB and PostgreSQL when they do not answer.
# The test suite needs all three: it fails, saying what to start, when one is missing.
set -uo pipefail

answers() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

wait_for() {
    local name=$1 port=$2
    for _ in $(seq 1 50); do
        answers "$port" && { echo "$name: up on $port"; return 0; }
        sleep 0.2
    done
    echo "$name: not answering on $port (later tests that need it will say so)" >&2
}

if ! answers 6379; then
    if command -v redis-server >/dev/null; then
        mkdir -p /var/lib/redis /var/log/redis
        redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" \
            --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log
    fi
fi
wait_for redis 6379

if ! answers 3306; then
    if [ -x /usr/sbin/mariadbd ]; then
        start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
    fi
fi
wait_for mariadb 3306

if ! answers 5432; then
    if ls /etc/postgresql >/dev/null 2>&1; then
        pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
    fi
fi
wait_for postgresql 5432
exit 0
