-- Argo CD health check for lockstep.dev/MCPServerInterface.
--
-- Reads what the Lockstep operator writes in status (docs/operator.md):
--   Verified -> Healthy      every selected pod serves an approved interface
--   Pending  -> Progressing  pods have not reported yet, or the operator has not seen this generation
--   Drifted  -> Degraded     a pod serves an interface that no approved revision matches
--   Degraded -> Degraded     stale reports, unreachable servers, invalid interfaces, conflicts or a bad spec
-- Install it in argocd-cm under resource.customizations.health.lockstep.dev_MCPServerInterface
-- (examples/gitops/argocd/argocd-cm.yaml). Written for Argo CD's Lua 5.1 (gopher-lua).
local hs = {}

local function condition(status, wanted)
  if status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == wanted then
      return c
    end
  end
  return nil
end

local function drifted_revisions(status)
  local count = 0
  if status.observed ~= nil then
    for _, revision in ipairs(status.observed) do
      if revision.approved ~= true then
        count = count + 1
      end
    end
  end
  return count
end

if obj.status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the Lockstep operator to observe this MCPServerInterface"
  return hs
end

local status = obj.status
local generation = obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the Lockstep operator to observe generation " .. tostring(generation)
  return hs
end

local ready = condition(status, "Ready")
local stalled = condition(status, "Stalled")
local pods = status.podsReady or "0/0"

if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = "Invalid spec: " .. (stalled.message or stalled.reason or "see status.conditions")
  return hs
end

if status.phase == "Verified" then
  hs.status = "Healthy"
  hs.message = pods .. " pods serve an approved interface"
elseif status.phase == "Drifted" then
  hs.status = "Degraded"
  hs.message = "Interface drift: " .. tostring(drifted_revisions(status)) ..
    " unapproved revision(s) observed, " .. pods .. " pods verified; review with `lockstep diff " ..
    obj.metadata.name .. " -n " .. (obj.metadata.namespace or "default") .. "`"
elseif status.phase == "Degraded" then
  hs.status = "Degraded"
  hs.message = (ready ~= nil and ready.message) or (pods .. " pods verified")
  if status.pods ~= nil then
    local parts = {}
    for _, state in ipairs({"stale", "unreachable", "invalid", "conflict"}) do
      local n = status.pods[state]
      if n ~= nil and n > 0 then
        table.insert(parts, tostring(n) .. " " .. state)
      end
    end
    if #parts > 0 then
      hs.message = hs.message .. " (" .. table.concat(parts, ", ") .. ")"
    end
  end
else
  hs.status = "Progressing"
  hs.message = (ready ~= nil and ready.message) or "Waiting for the selected pods to report their interface"
end
return hs
