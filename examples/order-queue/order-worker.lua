-- order-worker: the second scenario baton was designed from. Orders arrive
-- as tasks of the queue "orders" (`baton queue push orders '{"id":42}'`
-- stores one under <prefix>queue/orders/); every node of the cluster carries
-- this job, and each task is claimed and processed by exactly one of them.
--
-- The job gets the task as ctx.task = {key=, value=}, "processes" the order
-- (a short sleep standing for the real work: a payment call, an e-mail, ...;
-- see jobs/order-worker.lua for one that POSTs to an API) and marks it done
-- at <prefix>orders/done/<id> with ctx:put_fenced: a node that lost its
-- claim cannot mark it. Since every mark is a put, a task processed twice
-- would leave its done key at version 2; run.sh checks they are all at 1.
return {
  description = "process each task of the orders queue once and mark it done",
  queue = "orders",
  timeout = 30,
  concurrency = "allow",   -- tasks are independent: process them in parallel
  retry = { attempts = 3, backoff = 1, max_backoff = 5 },
  on_node_loss = "rerun",  -- a task whose node died is processed elsewhere

  run = function(ctx)
    local P = baton.config.prefix
    if P:sub(-1) ~= "/" then P = P .. "/" end
    if type(ctx.task) ~= "table" then error("no ctx.task: this node does not run queue jobs yet") end
    local order = baton.json.decode(ctx.task.value)
    if type(order) ~= "table" or order.id == nil then
      error("not an order: " .. tostring(ctx.task.value))
    end
    baton.sleep(0.2 + math.random() * 0.3)   -- the work
    assert(ctx:put_fenced(P .. "orders/done/" .. tostring(order.id), baton.json.encode {
      node = ctx.node, task = ctx.task.key, attempt = ctx.attempt, at = baton.now() }))
    ctx.log.info("order done", { id = order.id })
  end,
}
