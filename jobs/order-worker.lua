-- order-worker: processes the "orders" queue, one task per run.
--
-- Each task put under <prefix>queue/orders/ (`baton queue push orders
-- '{"id":42,"amount":1999}'`) is claimed by exactly one node and given to
-- run as ctx.task ({key=, value=}). The task is a JSON order; the worker
-- POSTs it to ORDER_API (default http://127.0.0.1:8080/orders) and marks it
-- done under <prefix>orders/done/<id> with ctx:put_fenced, so a worker that
-- lost its claim cannot mark it twice. Failures are retried 5 times with
-- backoff; a task whose node dies is run again elsewhere.
return {
  description = "POST each order task to ORDER_API, then mark it done",
  queue = "orders",
  timeout = 60,
  concurrency = "allow",   -- tasks are independent: run them in parallel
  retry = { attempts = 5, backoff = 2, max_backoff = 60, jitter = 0.5 },
  on_node_loss = "rerun",

  run = function(ctx)
    local order, err = baton.json.decode(ctx.task.value)
    if type(order) ~= "table" or order.id == nil then
      error("not an order: " .. tostring(err or ctx.task.value))
    end
    local api = os.getenv("ORDER_API") or "http://127.0.0.1:8080/orders"
    local r, herr = baton.http {
      method = "POST", url = api, timeout = 30,
      headers = { ["Content-Type"] = "application/json", ["Idempotency-Key"] = tostring(order.id) },
      body = ctx.task.value,
    }
    if not r then error("order " .. tostring(order.id) .. ": " .. herr) end
    if r.status >= 300 then error(("order %s: %s answered %d"):format(order.id, api, r.status)) end
    assert(ctx:put_fenced(baton.config.prefix .. "orders/done/" .. tostring(order.id),
      baton.json.encode { node = ctx.node, at = baton.now() }))
    ctx.log.info("order done", { id = order.id })
  end,
}
