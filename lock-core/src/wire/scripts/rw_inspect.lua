-- rw_inspect: read a read-write lock's state in one atomic step, for operators.
--
-- KEYS[1]: the writer; KEYS[2]: the readers; KEYS[3]: the writer-waiting mark
--
-- Returns {pttl, value, mark_pttl, now_ms, reader_1, share_1, ...}: the writer as
-- inspect.lua, the mark's remaining time in ms (-2: no waiting writer), the server clock, and
-- every reader's owner id and "count|expiry (ms)"
local out = {redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[1]),
  redis.call('PTTL', KEYS[3]), ms(redis.call('TIME'))}
for _, v in ipairs(redis.call('HGETALL', KEYS[2])) do
  out[#out + 1] = v
end
return out
