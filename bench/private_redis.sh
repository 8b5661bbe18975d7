# private_redis.sh - sourced by the A/B scripts of bench/ (metrics_ab.sh,
# publish_ab.sh): one private redis-server on a free loopback port, pinned
# to CPU 0, in a temp directory; $port is its port, and it is stopped by PID
# (and the directory removed) when the script exits.
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
taskset -c 0 redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
  --daemonize no --logfile "$dir/redis.log" &
rpid=$!
trap 'kill -TERM $rpid 2>/dev/null; wait $rpid 2>/dev/null; rm -rf "$dir"' EXIT
for i in $(seq 1 100); do
  redis-cli -p "$port" PING >/dev/null 2>&1 && break
  sleep 0.05
done
