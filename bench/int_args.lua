-- int_args(script, defaults): a bench script's `key=N` arguments (integers >= 1, keys of defaults) over a copy of
-- defaults; any other argument stops the script with its usage line.
return function(script, defaults)
  local cfg, usage = {}, {}
  for k, v in pairs(defaults) do cfg[k], usage[#usage + 1] = v, "[" .. k .. "=N]" end
  table.sort(usage)
  for _, a in ipairs(arg or {}) do
    local k, v = a:match("^(%w+)=(%d+)$")
    v = v and math.tointeger(tonumber(v))
    if not k or defaults[k] == nil or not v or v < 1 then
      error(string.format("usage: ddplua %s %s (N >= 1), got %s", script, table.concat(usage, " "), a), 0)
    end
    cfg[k] = v
  end
  return cfg
end
