-- rate_limit: one decision of a rate limit by the generic cell rate algorithm (GCRA).
--
-- KEYS[1]: the limit's state, a string "<tat>|<interval>|<burst>": the theoretical arrival
--          time (server clock, microseconds) and the quota that wrote it; no key when a full
--          burst is free (its time to live runs out when the tat passes)
-- ARGV[1]: the emission interval in microseconds (the period divided by the rate), >= 1;
--          0: the interval and burst the state was written with (to read it)
-- ARGV[2]: the burst: how many permits may be taken at once, >= 1
-- ARGV[3]: the permits this request takes, 0..=burst (0: only read: would one be allowed?)
--
-- A request of n permits is allowed when now >= max(tat, now) + n * interval - burst *
-- interval, and then moves the tat to max(tat, now) + n * interval. Returns
--         {1, remaining, 0, reset, interval, burst}        allowed
--         {0, remaining, retry, reset, interval, burst}    limited: nothing written
--         nil                                              ARGV[1] 0 and no state
-- remaining: permits that could be taken now (after this request); retry: microseconds until
-- this request would be allowed; reset: microseconds until a full burst is free again.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local tat = now
local stored = redis.call('GET', KEYS[1])
if stored then
  local last, i, b = string.match(stored, '^(%d+)|(%d+)|(%d+)$')
  if not last then
    return redis.error_reply('WRONGTYPE the rate limit key holds a value lock-core did not write')
  end
  tat = math.max(tonumber(last), now)
  if interval == 0 then
    interval, burst = tonumber(i), tonumber(b)
  end
elseif interval == 0 then
  return false
end
local window = burst * interval
local allow_at = tat + math.max(n, 1) * interval - window
if now < allow_at then
  local remaining = math.max(0, math.floor((now - (tat - window)) / interval))
  return {0, remaining, allow_at - now, tat - now, interval, burst}
end
if n > 0 then
  tat = tat + n * interval
  local value = string.format('%.0f|%.0f|%.0f', tat, interval, burst)
  redis.call('SET', KEYS[1], value, 'PX', math.ceil((tat - now) / 1000))
end
return {1, math.floor((now - (tat - window)) / interval), 0, tat - now, interval, burst}
