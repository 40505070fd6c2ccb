-- One PN-counter component per process: field ARGV[1] holds its cumulative hits, field
-- 'r:' .. ARGV[1] its cumulative refunds (never above its hits). Each keeps its max.
local hits = redis.call('HGET', KEYS[1], ARGV[1]) or '0'
if tonumber(ARGV[2]) > tonumber(hits) then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  hits = ARGV[2]
end
local refunds = ARGV[4] or '0'
if tonumber(refunds) > tonumber(hits) then
  refunds = hits
end
local refund_field = 'r:' .. ARGV[1]
local stored = redis.call('HGET', KEYS[1], refund_field) or '0'
if tonumber(refunds) > tonumber(stored) then
  redis.call('HSET', KEYS[1], refund_field, refunds)
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
local all = redis.call('HGETALL', KEYS[1])
local component_hits = {}
for i = 1, #all, 2 do
  if string.sub(all[i], 1, 2) ~= 'r:' then
    component_hits[all[i]] = tonumber(all[i + 1])
  end
end
local total, total_refunds = 0, 0
for i = 1, #all, 2 do
  local field = all[i]
  if string.sub(field, 1, 2) == 'r:' then
    local own_hits = component_hits[string.sub(field, 3)] or 0
    total_refunds = total_refunds + math.min(tonumber(all[i + 1]), own_hits)
  else
    total = total + tonumber(all[i + 1])
  end
end
return {total, total_refunds}
