-- rate_limit: one decision of a rate limit by the generic cell rate algorithm (GCRA).
--
-- KEYS[1]: the limit's state, a string "<tat>|<interval>|<burst>": the theoretical arrival
--          time (server clock, microseconds) and the quota that wrote it; no key when a full
--          burst is free (its time to live runs out when the tat passes)
-- ARGV[1]: the emission interval in microseconds (the period divided by the rate), >= 1
--          (0, in rate_inspect.lua: the interval and burst the state was written with)
-- ARGV[2]: the burst: how many permits may be taken at once, >= 1
-- ARGV[3]: the permits this request takes, 0..=burst (0: only read: would one be allowed?)
--
-- A request of n permits is allowed when now >= max(tat, now) + n * interval - burst *
-- interval, and then moves the tat to max(tat, now) + n * interval. Returns
--         {1, remaining, 0, reset, interval, burst}        allowed
--         {0, remaining, retry, reset, interval, burst}    limited: nothing written
--         nil                                              ARGV[1] 0 and no state
-- The decision is the prelude's rate_decide, which batch.lua also runs.
-- remaining: permits that could be taken now (after this request); retry: microseconds until
-- this request would be allowed; reset: microseconds until a full burst is free again.
return rate_decide(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]),
  redis.call('TIME'))
