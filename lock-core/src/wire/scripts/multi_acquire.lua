-- multi_acquire: take several locks at once, all or none (one owner for all).
--
-- KEYS[i]: the i-th lock string
-- ARGV[1]: owner id
-- ARGV[2]: lease in milliseconds
-- ARGV[3]: '1' if the caller will wait for a release when a lock is busy
-- ARGV[3 + i]: the hold count the caller believes the owner has on KEYS[i] (0: not held)
--
-- Returns a table answer (see engine/answer.rs):
--         {1, token_1, ..., token_n}  all taken (also the answer to a repeat of an applied call)
--         {0, i, pttl}   KEYS[i] is held by another owner (pttl ms left, -1: none); nothing taken
--         {3, i}         the owner's hold count on KEYS[i] is not as expected (the hold was
--                        lost); nothing taken
local owner = ARGV[1]
local plan = {}
local applied, pending = 0, 0
for i, key in ipairs(KEYS) do
  local value, o, c, t, r, w = read_lock(key)
  if value == false then
    return foreign()
  end
  local expected = tonumber(ARGV[3 + i])
  if o == '' then
    if expected ~= 0 then
      return {3, i}
    end
    pending = pending + 1
    plan[i] = {fresh = true, token = t, released = r}
  elseif o ~= owner then
    if expected ~= 0 then
      return {3, i}
    end
    if ARGV[3] == '1' and w == '' then
      redis.call('SET', key, value .. '1', 'KEEPTTL')
    end
    return {0, i, redis.call('PTTL', key)}
  elseif c == expected then
    pending = pending + 1
    plan[i] = {count = c, token = t, released = r, waiters = w}
  elseif c == expected + 1 then
    applied = applied + 1
    plan[i] = {token = t}
  else
    return {3, i}
  end
end
local out = {1}
if applied > 0 then
  if pending > 0 then
    -- Some applied and some not: not a repeat of this call. Something else moved the counts.
    for i = 1, #KEYS do
      if not plan[i].fresh and plan[i].count == nil then
        return {3, i}
      end
    end
  end
  for i = 1, #KEYS do
    out[i + 1] = tonumber(plan[i].token)
  end
  return out
end
local now
for i, key in ipairs(KEYS) do
  local p = plan[i]
  local token
  if p.fresh then
    if not p.token and not now then
      now = redis.call('TIME')
    end
    token = next_token(p.token, now)
    redis.call('SET', key, lock_string(owner, '1', token, p.released, ''), 'PX', ARGV[2])
  else
    token = take_again(key, owner, p.count, p.token, p.released, p.waiters, p.count, ARGV[2])
  end
  out[i + 1] = tonumber(token)
end
return out
