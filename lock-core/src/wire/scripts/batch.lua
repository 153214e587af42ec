-- batch: several mutex acquisitions and releases and rate-limit decisions in one call, each
-- with its own answer, so the cost of a call is paid once for all of them (and the server
-- clock is read once: every name taken fresh in a batch gets the same seed, which is fine, as
-- tokens are per name; every decision has the same now, as if they came at one instant).
--
-- KEYS[i]: the lock string of the i-th operation
-- ARGV[1]: how long a free lock keeps its fencing counter, in milliseconds (for releases)
-- ARGV[5i - 3 .. 5i + 1]: the i-th operation, one of
--   'a', owner, lease ms, expected hold count, will wait ('1'/'0')   answers as acquire.lua
--   'r', owner, expected hold count, token, release channel          answers as release.lua
--   'g', interval us, burst, permits, (unused)                       answers as rate_limit.lua
--
-- Returns one answer per operation, in order; false (a nil reply) where the key holds a value
-- this library did not write (a decision is never nil here: its interval is never 0).
local t, fresh
for i = 1, #KEYS do
  local op = ARGV[5 * i - 3]
  if op == 'a' or op == 'g' then
    t = redis.call('TIME')
    fresh = seed(t)
    break
  end
end
local out = {}
for i, key in ipairs(KEYS) do
  local a = 5 * i - 3
  local answer
  if ARGV[a] == 'a' then
    answer = acquire_lock(key, ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], t, fresh)
  elseif ARGV[a] == 'g' then
    answer = rate_decide(key, tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]),
      tonumber(ARGV[a + 3]), t)
  else
    answer = release_lock(key, ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[1])
  end
  if type(answer) == 'table' and answer.err then
    answer = false
  end
  out[i] = answer
end
return out
