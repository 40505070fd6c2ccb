
local own = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if tonumber(ARGV[2]) > own then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
local total = 0
for _, n in ipairs(redis.call('HVALS', KEYS[1])) do
  total = total + tonumber(n)
end
return total
