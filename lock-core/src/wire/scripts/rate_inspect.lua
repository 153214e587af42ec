-- rate_inspect: a rate limit's state, read with the quota it was written with (see
-- rate_limit.lua); takes nothing.
--
-- KEYS[1]: the limit's state
--
-- Returns rate_limit.lua's answer for a request of 0 permits, or nil when there is no state.
return rate_decide(KEYS[1], 0, 0, 0, redis.call('TIME'))
