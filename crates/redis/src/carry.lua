-- The cell's carried-over component: set once (the first seed of a region wins, so its
-- processes seed a cell once), in the field 'carried', which no process id (16 hex digits)
-- takes. A new hash gets the cells' expiry; replay refreshes it as for any cell.
-- KEYS[1] the cell; ARGV[1] the carried count; ARGV[2] TTL ms.
if redis.call('HSETNX', KEYS[1], 'carried', ARGV[1]) == 1 and redis.call('PTTL', KEYS[1]) < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return redis.call('HGETALL', KEYS[1])
