-- Take rights of a `never_above` counter's cell (rights.rs): granted only while the sliding
-- rule holds for what the region's processes took.
-- KEYS[1] the cell's takes, KEYS[2] the previous cell's, KEYS[3] the counter's rights hash
-- (`newest`: the newest cell taken from; `run`: the run id of the Redis that granted them).
-- ARGV[1] limit, ARGV[2] window ms, ARGV[3] elapsed ms, ARGV[4] want, ARGV[5] the cell's
-- sequence, ARGV[6] TTL ms, ARGV[7] '1' when the previous cell weighs (sliding windows).
-- Returns the rights granted and the replicas connected to this node (the caller waits for
-- one to hold the take before spending it).
local replicas = tonumber(string.match(redis.call('INFO', 'replication'), 'connected_slaves:(%d+)') or '0')
local run = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)') or ''
local limit = tonumber(ARGV[1])
local ttl = ARGV[6]
local granted_by = redis.call('HGET', KEYS[3], 'run')
if granted_by and granted_by ~= run then
  -- Another Redis granted this counter's rights (a failover, or a restart from a snapshot):
  -- takes it never replicated are unknown here, so both cells count as fully taken.
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ttl)
end
redis.call('HSET', KEYS[3], 'run', run)
redis.call('PEXPIRE', KEYS[3], ttl)
local sequence = tonumber(ARGV[5])
local newest = tonumber(redis.call('HGET', KEYS[3], 'newest') or '-1')
if sequence < newest then
  -- A later cell's room was computed from this one's takes: closed.
  return {0, replicas}
end
if sequence > newest then
  redis.call('HSET', KEYS[3], 'newest', ARGV[5])
end
local taken = tonumber(redis.call('GET', KEYS[1]) or '0')
local weight = 0
if ARGV[7] == '1' then
  local previous = tonumber(redis.call('GET', KEYS[2]) or '0')
  local window = tonumber(ARGV[2])
  local left = window - math.min(tonumber(ARGV[3]), window)
  -- Lua's numbers are doubles: the product may be inexact past 2^53. The error is far
  -- below 2e-6 for any count a limit holds, and rounding up only weighs more.
  weight = math.floor(previous * left / window + 2e-6)
end
local room = limit - weight - taken
local granted = math.min(tonumber(ARGV[4]), room)
if granted <= 0 then
  return {0, replicas}
end
redis.call('INCRBY', KEYS[1], granted)
redis.call('PEXPIRE', KEYS[1], ttl)
return {granted, replicas}
