// baton's dashboard: one page, three views chosen by the URL's hash.
//
//   #/                the cluster: nodes, jobs, recent runs (failures first)
//   #/jobs/NAME       a job: its spec, its history, a chart of duration
//                     and lateness over its last runs, its source, its
//                     versions and the diff between two of them
//   #/runs/JOB/ID     a run: its record, its attempts and its kept output
//
// Everything comes from the node's API (docs/api.md), polled every POLL_MS
// while the tab is visible. Each poll re-renders only the rows whose data
// changed, so a node that leaves /api/v1/nodes leaves the page, and focus
// and scroll stay where they were. Every piece of data reaches the DOM
// through textContent or setAttribute, never as markup.
//
// Actions (run now, with the job's params when it declares some; pause,
// resume; kill a running run, once confirmed) are shown only when
// /api/v1/info says the node is writable (it has --http-token-file) and the
// page has a token: typed into the token field or passed once as #token=...
// in the URL (then removed from it), kept in sessionStorage for this tab
// only.
'use strict';

(() => {
  const POLL_MS = 2000;
  const TIMEOUT_MS = 8000;
  const TOKEN_KEY = 'baton.token';
  const RUNS_LIMIT = 50;
  const HISTORY_LIMIT = 100;
  const CHART_RUNS = 100;
  const JOB_ROWS_MAX = 300;
  const BIG_JOB_LIST = 2000; // jobs: past this many, the list is fetched every
  const BIG_JOB_POLL_MS = 10000; // this often instead of every poll

  // States of a run record (docs/guide.md "Run states").
  const FAILED = new Set(['failed', 'abandoned']);
  const WARN = new Set(['killed', 'skipped', 'retrying']);
  const ENDED = new Set(['succeeded', 'failed', 'abandoned', 'killed', 'skipped']);

  const S = {
    token: null,
    info: null,
    skew: 0, // server time - browser time, seconds (from /api/v1/info)
    route: null,
    view: null, // {name, el, update(data), ...}
    timer: null,
    polling: false,
    lastOk: 0,
    failingSince: 0,
    filter: '',
  };

  // ------------------------------------------------------------------ DOM

  // An element: h('td', {class: 'x', title: t}, child, 'text', ...). Strings
  // become text nodes; null/false children and attributes are left out.
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    setAttrs(el, attrs);
    for (const k of kids.flat(Infinity)) {
      if (k == null || k === false) continue;
      el.append(k instanceof Node ? k : String(k));
    }
    return el;
  }

  const SVG_NS = 'http://www.w3.org/2000/svg';
  function svg(tag, attrs, ...kids) {
    const el = document.createElementNS(SVG_NS, tag);
    setAttrs(el, attrs);
    for (const k of kids.flat(Infinity)) {
      if (k == null || k === false) continue;
      el.append(k instanceof Node ? k : String(k));
    }
    return el;
  }

  function setAttrs(el, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v == null || v === false) continue;
      if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
      else if (k === 'data') for (const [dk, dv] of Object.entries(v)) { if (dv != null) el.dataset[dk] = String(dv); }
      else el.setAttribute(k, v === true ? '' : String(v));
    }
  }

  const $ = (sel, root) => (root || document).querySelector(sel);

  // Makes tbody's rows those of items, in order: a row is kept while its
  // item (and ctx) is unchanged, rebuilt when it changed, removed when its
  // key is gone. Each cell gets its column's name as data-label (a narrow
  // screen shows rows as blocks of labelled cells: style.css).
  function syncRows(tbody, items, keyOf, build, ctx) {
    const heads = tbody.parentElement && tbody.parentElement.tHead ? Array.from(tbody.parentElement.tHead.rows[0].cells) : [];
    const old = new Map();
    for (const tr of Array.from(tbody.children)) old.set(tr.dataset.key, tr);
    const extra = JSON.stringify(ctx || null);
    let prev = null;
    for (const item of items) {
      const key = keyOf(item);
      const sig = JSON.stringify(item) + extra;
      let tr = old.get(key);
      if (!tr || tr._sig !== sig) {
        const fresh = build(item);
        Array.from(fresh.cells).forEach((c, i) => {
          const label = heads[i] ? heads[i].textContent : '';
          if (label && !c.dataset.label) c.dataset.label = label;
        });
        fresh.dataset.key = key;
        fresh._sig = sig;
        if (tr) tr.replaceWith(fresh);
        tr = fresh;
      }
      old.delete(key);
      const want = prev ? prev.nextSibling : tbody.firstChild;
      if (want !== tr) tbody.insertBefore(tr, want);
      prev = tr;
    }
    for (const tr of old.values()) tr.remove();
  }

  // ------------------------------------------------------------ formatting

  const num = (v) => (typeof v === 'number' && Number.isFinite(v) ? v : null);
  const nowSec = () => Date.now() / 1000 + S.skew;

  // Seconds as a short duration, as the CLI prints them: 850ms, 12s, 3m04s.
  function dur(s) {
    if (num(s) === null) return '–';
    if (s < 0) s = 0;
    if (s < 1) return `${Math.round(s * 1000)}ms`;
    if (s < 10) return `${Math.round(s * 10) / 10}s`;
    if (s < 60) return `${Math.round(s)}s`;
    s = Math.round(s);
    const p2 = (n) => String(n).padStart(2, '0');
    if (s < 3600) return `${Math.floor(s / 60)}m${p2(s % 60)}s`;
    if (s < 86400) return `${Math.floor(s / 3600)}h${p2(Math.floor((s % 3600) / 60))}m`;
    return `${Math.floor(s / 86400)}d${p2(Math.floor((s % 86400) / 3600))}h`;
  }

  // Signed seconds for small offsets: +0.012s.
  function signed(s, digits = 3) {
    const txt = Math.abs(s).toFixed(digits);
    return (s < 0 && Number(txt) !== 0 ? '−' : '+') + txt + 's'; // never "−0.000s"
  }

  // "in 3s", "12s ago", relative to the server's clock.
  function rel(t) {
    if (num(t) === null) return '';
    const d = t - nowSec();
    const a = Math.round(Math.abs(d)); // whole seconds: this text changes every second
    if (a === 0) return 'now';
    return d > 0 ? `in ${dur(a)}` : `${dur(a)} ago`;
  }

  // Epoch seconds as local wall time: 14:02:07 today, else Dec 1 14:02.
  function clock(t) {
    if (num(t) === null) return '–';
    const d = new Date(t * 1000);
    const today = new Date(nowSec() * 1000);
    const hms = d.toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false });
    if (d.toDateString() === today.toDateString()) return hms;
    return `${d.toLocaleDateString(undefined, { month: 'short', day: 'numeric' })} ${hms}`;
  }
  const iso = (t) => (num(t) === null ? '' : new Date(t * 1000).toISOString());

  // A <time> that shows wall time and says how long ago in its title; the
  // relative text of .rel elements is refreshed every second.
  function timeEl(t, mode) {
    if (num(t) === null) return h('span', { class: 'muted' }, '–');
    if (mode === 'rel') return h('time', { class: 'rel', datetime: iso(t), title: iso(t), data: { t } }, rel(t));
    return h('time', { datetime: iso(t), title: `${iso(t)} (${rel(t)})` }, clock(t));
  }

  function tickRelative() {
    for (const el of document.querySelectorAll('.rel[data-t]')) {
      const t = Number(el.dataset.t);
      const txt = rel(t);
      if (el.textContent !== txt) el.textContent = txt;
    }
    for (const el of document.querySelectorAll('.since[data-t]')) {
      const txt = sinceText(Number(el.dataset.t));
      if (el.textContent !== txt) el.textContent = txt;
    }
  }

  // How long a running run has run: whole seconds, "+" for "and counting".
  function sinceText(t) {
    const d = nowSec() - t;
    return d < 1 ? '<1s' : `${dur(Math.floor(d))}+`;
  }

  // RFC 3339 (as job ls prints next instants) to epoch seconds.
  function parseInstant(s) {
    if (typeof s !== 'string') return null;
    const ms = Date.parse(s);
    return Number.isNaN(ms) ? null : ms / 1000;
  }

  // The wall time of an RFC 3339 string in the zone it was written in:
  // "2026-12-02T05:42:46+01:00" -> "05:42:46 +01:00".
  function zoned(s) {
    const m = /^(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(?:\.\d+)?(Z|[+-]\d\d:\d\d)$/.exec(s || '');
    if (!m) return s || '–';
    const t = parseInstant(s);
    const sameDay = t !== null && Math.abs(t - nowSec()) < 20 * 3600;
    return `${sameDay ? '' : m[1] + ' '}${m[2]}${m[3] === 'Z' ? ' UTC' : ' ' + m[3]}`;
  }

  function stateClass(state) {
    if (FAILED.has(state)) return 'bad';
    if (WARN.has(state)) return 'warn';
    if (state === 'succeeded') return 'good';
    if (state === 'running') return 'busy';
    return 'neutral';
  }
  const badge = (text, cls, title) => h('span', { class: `badge ${cls}`, title }, text);
  const stateBadge = (state) => badge(state || '?', stateClass(state));

  // ------------------------------------------------------------------ runs

  function runId(r) {
    if (typeof r.key === 'string') return r.key;
    if (typeof r.id === 'string') return r.id;
    if (num(r.fire) !== null) return new Date(r.fire * 1000).toISOString().replace('.000Z', 'Z');
    return '?';
  }

  // A skipped run never ran: no duration (its record's started and finished
  // are both when it was skipped).
  function runDuration(r) {
    if (r.state === 'skipped') return null;
    if (num(r.duration) !== null) return r.duration;
    if (num(r.started) !== null && num(r.finished) !== null) return r.finished - r.started;
    return null;
  }

  // Start - instant, for a run of a scheduled instant (not a manual run, a
  // queue task or an event): when its first attempt started after the time
  // it was due.
  function runLateness(r) {
    if (num(r.fire) === null || r.manual || r.task || r.event) return null;
    let started = r.started;
    const first = Array.isArray(r.attempts) ? r.attempts.find((a) => a && a.attempt === 1) : null;
    if (first && num(first.started) !== null) started = first.started;
    else if (r.attempt !== 1) return null;
    if (num(started) === null || r.state === 'skipped') return null;
    return started - r.fire;
  }

  function durationCell(r) {
    const d = runDuration(r);
    if (d !== null) return h('td', { class: 'num' }, dur(d));
    if (r.state === 'running' && num(r.started) !== null) {
      return h('td', { class: 'num' }, h('span', { class: 'since', data: { t: r.started } }, sinceText(r.started)));
    }
    if (r.state === 'skipped') return h('td', { class: 'num muted', title: 'skipped: it did not run' }, '–');
    return h('td', { class: 'num muted' }, '–');
  }

  function latenessCell(r) {
    const l = runLateness(r);
    if (l === null) return h('td', { class: 'num muted', title: 'not a scheduled instant' }, '–');
    return h('td', { class: `num${l > 1 ? ' late' : ''}` }, dur(l));
  }

  function kindOf(r) {
    if (r.manual) return 'manual';
    if (r.task) return 'queue task';
    if (r.event) return 'event';
    if (num(r.shard) !== null) return `shard ${r.shard}`;
    return '';
  }

  const runHref = (job, id) => `#/runs/${encodeURIComponent(job)}/${id.split('/').map(encodeURIComponent).join('/')}`;
  const jobHref = (job) => `#/jobs/${encodeURIComponent(job)}`;

  // A run's id as a link: the whole id is its text (selected and copied
  // whole) and its title; it may wrap after each "~" of an event id
  // (<time>~<job>~<id>~<state>) and, past that, anywhere (.runid).
  function runLink(job, id) {
    const kids = [];
    id.split('~').forEach((part, i) => { if (i > 0) kids.push('~', h('wbr')); kids.push(part); });
    return h('a', { class: 'runid mono small', href: runHref(job, id), title: id }, kids);
  }

  // Failures first (newest first among them), then the rest newest first;
  // the API's order is newest first, which a stable sort keeps.
  function failuresFirst(list) {
    return list
      .map((r, i) => ({ r, i }))
      .sort((a, b) => (FAILED.has(b.r.state) - FAILED.has(a.r.state)) || (a.i - b.i))
      .map((x) => x.r);
  }

  // ------------------------------------------------------------------- API

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  // GET (or opts.method) the API path (relative to the page, so a node
  // behind a path prefix works); the decoded JSON, or an ApiError.
  async function api(path, opts = {}) {
    const headers = { Accept: 'application/json' };
    if (opts.auth && S.token) headers.Authorization = `Bearer ${S.token}`;
    if (opts.body !== undefined) headers['Content-Type'] = 'application/json';
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), TIMEOUT_MS);
    let res;
    let text;
    try {
      res = await fetch(path, { method: opts.method || 'GET', headers, body: opts.body, cache: 'no-store', signal: ctl.signal, credentials: 'omit' });
      text = await res.text();
    } catch (e) {
      const why = e.name === 'AbortError' ? `no answer within ${TIMEOUT_MS / 1000}s` : (e.message || String(e));
      throw new ApiError(0, 'EUNREACHABLE', why);
    } finally {
      clearTimeout(timer);
    }
    let body = null;
    try { body = text ? JSON.parse(text) : null; } catch (_) { body = null; }
    if (!res.ok) {
      const msg = body && typeof body.error === 'string' ? body.error : `HTTP ${res.status} ${res.statusText}`.trim();
      throw new ApiError(res.status, body && body.code ? String(body.code) : `HTTP${res.status}`, msg);
    }
    return body;
  }

  // Fetches every path of paths at once: {key: value} for those that
  // answered, and errors {key: ApiError} for the others.
  async function fetchAll(paths) {
    const keys = Object.keys(paths);
    const got = await Promise.allSettled(keys.map((k) => api(paths[k])));
    const data = {};
    const errors = {};
    got.forEach((g, i) => {
      if (g.status === 'fulfilled') data[keys[i]] = g.value;
      else errors[keys[i]] = g.reason instanceof ApiError ? g.reason : new ApiError(0, 'EINTERNAL', String(g.reason));
    });
    return { data, errors };
  }

  // --------------------------------------------------------------- banner

  function showBanner(kind, parts) {
    const b = $('#banner');
    b.className = `banner ${kind}`;
    b.replaceChildren(...parts);
    b.hidden = false;
  }
  function hideBanner() {
    const b = $('#banner');
    if (!b.hidden) { b.hidden = true; b.replaceChildren(); }
  }

  let noticeTimer = null;
  function notice(kind, text) {
    const n = $('#notice');
    n.className = `notice ${kind}`;
    n.textContent = text;
    n.hidden = false;
    clearTimeout(noticeTimer);
    noticeTimer = setTimeout(() => { n.hidden = true; }, 6000);
  }

  // Says what failed in the last poll, or hides the banner when all answered.
  function reportErrors(errors) {
    const list = Object.entries(errors);
    if (list.length === 0) {
      S.failingSince = 0;
      hideBanner();
      return;
    }
    if (!S.failingSince) S.failingSince = Date.now();
    const unreachable = list.find(([, e]) => e.status === 0);
    const parts = [];
    if (unreachable) {
      parts.push(h('strong', null, 'Node unreachable. '),
        `The baton node serving this page (${location.host}) did not answer: ${unreachable[1].message}. `);
    } else {
      const seen = new Set();
      parts.push(h('strong', null, 'The API answered with an error. '));
      for (const [what, e] of list) {
        const line = `${e.message} (${e.code}${e.status ? `, HTTP ${e.status}` : ''})`;
        if (seen.has(line)) continue;
        seen.add(line);
        parts.push(h('span', { class: 'err-item', data: { what } }, `${what}: ${line}. `));
      }
    }
    parts.push(S.lastOk ? `Showing data from ${clock(S.lastOk)}; retrying every ${POLL_MS / 1000}s.` : `Retrying every ${POLL_MS / 1000}s.`);
    showBanner('error', parts);
  }

  // ---------------------------------------------------------------- header

  function canAct() {
    return !!(S.token && S.info && S.info.writable === true);
  }

  function renderHeader() {
    const i = S.info;
    const line = $('#cluster-line');
    if (i) {
      line.replaceChildren(
        h('span', { class: 'kv' }, h('span', { class: 'k' }, 'node'), ' ', h('b', { id: 'served-by' }, i.node || '?')),
        h('span', { class: 'kv' }, h('span', { class: 'k' }, 'leader'), ' ',
          i.leader ? h('b', { id: 'leader-name' }, i.leader) : h('b', { id: 'leader-name', class: 'bad-text' }, 'none')),
        h('span', { class: 'kv' }, h('span', { class: 'k' }, 'version'), ' ', i.version || '?'),
        h('span', { class: `kv mode ${i.writable ? 'rw' : 'ro'}`, title: i.writable ? 'writes need the node\'s token' : 'started without --http-token-file: read-only' },
          i.writable ? 'writable' : 'read-only'),
      );
      $('#foot-node').textContent = `served by ${i.node || '?'} · baton ${i.version || '?'}`;
    }
    const tokenState = $('#token-state');
    const has = !!S.token;
    $('#token-input').hidden = has;
    $('#token-save').hidden = has;
    $('label[for="token-input"]').hidden = has;
    $('#token-forget').hidden = !has;
    tokenState.hidden = !has;
    if (has) {
      tokenState.textContent = i && !i.writable ? 'token set (this node is read-only)' : 'token set';
    }
    document.body.classList.toggle('can-act', canAct());
  }

  function setLive(kind, text) {
    const l = $('#live');
    l.className = `live ${kind}`;
    $('#live-text').textContent = text;
  }

  // ----------------------------------------------------------------- token

  // sessionStorage may be refused (a sandboxed frame, storage disabled):
  // the token then lives as long as the page.
  const store = {
    get() { try { return sessionStorage.getItem(TOKEN_KEY); } catch (_) { return S.token; } },
    set(t) { try { sessionStorage.setItem(TOKEN_KEY, t); } catch (_) { /* page only */ } },
    drop() { try { sessionStorage.removeItem(TOKEN_KEY); } catch (_) { /* page only */ } },
  };

  function loadToken() {
    // #token=... (alone, or after the route: #/jobs/x&token=...) is taken
    // once, kept for this tab, and removed from the URL and history.
    const m = /(?:^#|[&?])token=([^&]*)/.exec(location.hash);
    if (m) {
      let t = m[1];
      try { t = decodeURIComponent(t); } catch (_) { /* as is */ }
      t = t.trim();
      if (t) { store.set(t); S.token = t; }
      let rest = location.hash.replace(/(?:^#|[&?])token=[^&]*/, (s) => (s.startsWith('#') ? '#' : ''));
      if (rest === '#' || rest === '') rest = '#/';
      history.replaceState(null, '', location.pathname + location.search + rest);
    }
    S.token = store.get() || null;
  }

  function bindToken() {
    $('#token-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const input = $('#token-input');
      const t = input.value.trim();
      input.value = '';
      if (!t) return;
      store.set(t);
      S.token = t;
      renderHeader();
      rerender();
      if (S.info && !S.info.writable) notice('info', 'Token kept, but this node is read-only: start it with --http-token-file FILE to enable actions.');
    });
    $('#token-forget').addEventListener('click', () => {
      store.drop();
      S.token = null;
      renderHeader();
      rerender();
    });
  }

  // --------------------------------------------------------------- actions

  const ACTIONS = {
    run: { label: 'Run now', path: 'run', done: (j, b) => `Run of ${j} requested${b && b.id ? ` (id ${b.id})` : ''}` +
      `${b && b.params && Object.keys(b.params).length ? ` with ${Object.keys(b.params).map((k) => `${k}=${b.params[k]}`).join(' ')}` : ''}.` },
    pause: { label: 'Pause', path: 'pause', done: (j, b) => (b && b.changed === false ? `${j} was already paused.` : `${j} paused.`) },
    resume: { label: 'Resume', path: 'resume', done: (j, b) => (b && b.changed === false ? `${j} was not paused.` : `${j} resumed.`) },
    kill: { label: 'Kill', path: 'kill', done: (j, b) => `Asked ${j} ${(b && b.killed || []).join(', ') || 'its runs'} to stop; the record says when it has.` },
  };

  // POSTs action kind of job (opts.body: the JSON body; opts.id: the run,
  // for kill) and says how it went in a notice.
  async function act(kind, job, btn, opts = {}) {
    const a = ACTIONS[kind];
    if (btn) btn.disabled = true;
    try {
      const q = opts.id != null ? `?id=${encodeURIComponent(opts.id)}` : '';
      const body = await api(`api/v1/jobs/${encodeURIComponent(job)}/${a.path}${q}`, {
        method: 'POST', auth: true, body: opts.body !== undefined ? opts.body : (kind === 'run' ? '{}' : undefined),
      });
      notice('good', a.done(job, body));
    } catch (e) {
      let hint = '';
      if (e.status === 401) hint = ' Check the token (Forget, then enter the first line of the node\'s --http-token-file).';
      notice('bad', `${a.label} ${job}${opts.id != null ? ` ${opts.id}` : ''} failed: ${e.message} (${e.code}${e.status ? `, HTTP ${e.status}` : ''}).${hint}`);
    } finally {
      if (btn) btn.disabled = false;
      if (S.view) S.view.jobsAt = 0; // show the change now, however long the list
      poll(true);
    }
  }

  // A modal dialog (<dialog>, so focus stays in it and Escape cancels):
  // title, body (nodes or text), fields [{name, value}] as labelled text
  // inputs, and the button that confirms (ok, danger for a red one). The
  // promise gives the fields' values ({} without fields) once confirmed,
  // or null when cancelled.
  let modalSeq = 0;
  function modal({ title, body, fields, ok, danger }) {
    return new Promise((resolve) => {
      const id = `modal-${++modalSeq}`;
      const inputs = (fields || []).map((f, i) => {
        const input = h('input', { id: `${id}-f${i}`, name: f.name, type: 'text', value: f.value, spellcheck: 'false', autocomplete: 'off', autofocus: i === 0 });
        return { f, input, row: h('div', { class: 'field' }, h('label', { for: input.id, class: 'mono' }, f.name), input) };
      });
      const cancel = h('button', { type: 'button', class: 'act', autofocus: inputs.length === 0, data: { choice: 'cancel' } }, 'Cancel');
      const confirm = h('button', { type: 'submit', class: `act act-confirm${danger ? ' danger' : ' act-run'}`, data: { choice: 'ok' } }, ok);
      const form = h('form', { class: 'modal-form', novalidate: true, autocomplete: 'off' },
        h('h2', { id: `${id}-title` }, title),
        h('div', { class: 'modal-body' }, body),
        inputs.length ? h('div', { class: 'fields-form' }, inputs.map((x) => x.row)) : null,
        h('div', { class: 'modal-buttons' }, cancel, confirm));
      const dlg = h('dialog', { class: 'modal', id, 'aria-labelledby': `${id}-title` }, form);
      let result = null;
      // (no submission, which the CSP's form-action 'none' would refuse)
      form.addEventListener('submit', (ev) => {
        ev.preventDefault();
        result = {};
        for (const x of inputs) result[x.f.name] = x.input.value;
        dlg.close();
      });
      cancel.addEventListener('click', () => dlg.close());
      dlg.addEventListener('close', () => { dlg.remove(); resolve(result); });
      document.body.append(dlg);
      dlg.showModal();
    });
  }

  // Run now: straight away for a job without params; else a form with each
  // declared param and its default first. params: the spec's, when the page
  // has it (the job page); else (the overview's listing has none) asked of
  // GET /api/v1/jobs/NAME.
  async function runNow(job, btn, params) {
    if (params === undefined) {
      try {
        const j = await api(`api/v1/jobs/${encodeURIComponent(job)}`);
        params = j && j.spec && typeof j.spec === 'object' ? j.spec.params : null;
      } catch (_) { params = null; } // (the run's own answer says what is wrong)
    }
    const names = params && typeof params === 'object' ? Object.keys(params).sort() : [];
    if (names.length === 0) return act('run', job, btn);
    const vals = await modal({
      title: `Run ${job} now`,
      body: h('p', null, 'With these params (ctx.params); each starts at the job\'s default.'),
      fields: names.map((k) => ({ name: k, value: params[k] == null ? '' : String(params[k]) })),
      ok: 'Run',
    });
    if (vals) return act('run', job, btn, { body: JSON.stringify({ params: vals }) });
    return undefined;
  }

  // Kill: asks first, then POST .../kill?id=ID.
  async function askKill(job, id, btn) {
    const yes = await modal({
      title: `Kill this run of ${job}?`,
      body: [h('p', null, 'Run ', h('span', { class: 'mono runid' }, id), ' of ', h('b', null, job), ' is running.'),
        h('p', { class: 'muted' }, 'It is asked to stop (ctx:cancelled() turns true, its processes get SIGTERM, then SIGKILL after the node\'s grace period), recorded killed, and not retried.')],
      ok: 'Kill', danger: true,
    });
    if (yes) return act('kill', job, btn, { id });
    return undefined;
  }

  function killButton(job, id) {
    return h('button', {
      type: 'button', class: 'act act-kill', data: { job, run: id, action: 'kill' },
      'aria-label': `Kill run ${id} of ${job}`, title: 'Stop this run (asks first)',
      onclick: (ev) => askKill(job, id, ev.currentTarget),
    }, 'Kill');
  }

  function actionButtons(job, paused, params) {
    const mk = (kind, fn) => h('button', {
      type: 'button', class: `act act-${kind}`, data: { job, action: kind },
      'aria-label': `${ACTIONS[kind].label}: ${job}`,
      onclick: (ev) => fn(ev.currentTarget),
    }, ACTIONS[kind].label);
    return h('span', { class: 'actions' }, mk('run', (b) => runNow(job, b, params)),
      paused ? mk('resume', (b) => act('resume', job, b)) : mk('pause', (b) => act('pause', job, b)));
  }

  // ------------------------------------------------------------------ views

  function section(id, title, ...body) {
    return h('section', { id, class: 'card', 'aria-labelledby': `${id}-title` },
      h('div', { class: 'card-head' }, h('h2', { id: `${id}-title` }, title), h('span', { class: 'count', id: `${id}-count` })),
      ...body);
  }

  function table(id, heads) {
    return h('div', { class: 'table-wrap' },
      h('table', { id: `${id}-table`, class: 'grid' },
        h('thead', null, h('tr', null, heads.map(([t, cls]) => h('th', { scope: 'col', class: cls }, t)))),
        h('tbody', { id: `${id}-body` })),
      h('p', { class: 'empty', id: `${id}-empty`, hidden: true }));
  }

  function setEmpty(id, list, text) {
    const e = document.getElementById(`${id}-empty`);
    e.hidden = list.length > 0;
    e.textContent = list.length > 0 ? '' : text;
  }

  function setCount(id, text) {
    const c = document.getElementById(`${id}-count`);
    if (c) c.textContent = text;
  }

  // ---- nodes

  function nodeRunning(v) {
    if (typeof v === 'number') return v;
    if (Array.isArray(v)) return v.length;
    return 0;
  }

  function clockCell(n) {
    const k = n.clock;
    if (!k || typeof k !== 'object') return h('td', { class: 'muted', title: 'this node does not publish its clock' }, '–');
    if (k.known !== true || num(k.correction) === null) return h('td', { class: 'muted', title: 'not measured yet' }, 'measuring…');
    const err = num(k.error) || 0;
    const maxSkew = num(n.max_skew);
    const skewed = k.skewed === true || (maxSkew !== null && Math.abs(k.correction) - err > maxSkew);
    const title = `ahead of the cluster's clock by ${signed(k.correction, 4)} (± ${err.toFixed(4)}s)` +
      (k.ref ? `, measured against ${k.ref}` : '') + (num(k.measured_at) !== null ? ` at ${iso(k.measured_at)}` : '') +
      (maxSkew !== null ? `; --max-skew ${maxSkew}s` : '');
    return h('td', { class: `clock${skewed ? ' skewed' : ''}`, title },
      h('span', { class: 'mono' }, signed(k.correction)), h('span', { class: 'pm' }, ` ±${err.toFixed(3)}`),
      skewed ? badge(`past max skew${maxSkew !== null ? ` ${maxSkew}s` : ''}`, 'bad') : null);
  }

  function labelChips(labels) {
    const keys = labels && typeof labels === 'object' ? Object.keys(labels).sort() : [];
    if (keys.length === 0) return h('span', { class: 'muted' }, 'none');
    return h('span', { class: 'chips' }, keys.map((k) => h('span', { class: 'chip' }, `${k}=${labels[k]}`)));
  }

  // The runs recorded running on node n among the overview's runs
  // (withRunningLast), which the summary and the recent runs count too. The
  // node's own figure, published once a second and counting only the runs
  // executing in its workers, is in the title.
  function runningCell(n, ctx) {
    const mine = (ctx.running && ctx.running[n.name]) || 0;
    const own = nodeRunning(n.running);
    return h('td', { class: 'num running', title: `${mine} run${mine === 1 ? '' : 's'} recorded running on ${n.name}; ` +
      `the node last published ${own} executing (it publishes once a second)` }, String(mine));
  }

  function nodeRow(n, ctx) {
    const leader = ctx.leader === n.name;
    const mismatch = ctx.version && n.version && n.version !== ctx.version;
    return h('tr', { class: `node${leader ? ' is-leader' : ''}`, data: { node: n.name } },
      h('th', { scope: 'row', class: 'name' },
        h('span', { class: 'node-name' }, n.name),
        leader ? h('span', { class: 'badge leader leader-mark', title: 'elected cluster leader', 'aria-label': 'leader' }, '★ leader') : null,
        ctx.self === n.name ? h('span', { class: 'badge neutral self-mark', title: 'the node serving this page' }, 'this node') : null),
      h('td', { class: mismatch ? 'warn-text' : null, title: mismatch ? `differs from ${ctx.self}'s ${ctx.version}` : null }, n.version || '–'),
      runningCell(n, ctx),
      h('td', null, labelChips(n.labels)),
      clockCell(n),
      h('td', { class: 'opt' }, num(n.started) !== null ? h('span', { title: iso(n.started) }, 'up ', h('span', { class: 'rel-up', data: { t: n.started } }, dur(nowSec() - n.started))) : '–'));
  }

  // ---- jobs

  function scheduleText(j) {
    if (j.schedule) return j.schedule;
    if (j.broken && !j.queue && !j.on) return '–';
    if (j.queue) return `queue: ${j.queue}`;
    if (j.on && typeof j.on === 'object') {
      const parts = Object.keys(j.on).map((st) => `${st}(${[].concat(j.on[st]).join(',')})`);
      return `on: ${parts.join(', ')}`;
    }
    return 'when triggered';
  }

  function jobState(j) {
    const b = [];
    if (j.broken) b.push(badge('broken', 'bad'));
    if (j.paused) b.push(badge('paused', 'warn'));
    if (!j.broken && !j.paused) b.push(badge('active', 'good'));
    if (num(j.running_revision) !== null) b.push(badge(`runs rev ${j.running_revision}`, 'neutral', 'the nodes still run this earlier, valid revision'));
    return b;
  }

  function jobRow(j, ctx) {
    const nextT = parseInstant(j.next);
    const last = j.last && typeof j.last === 'object' ? j.last : null;
    return h('tr', { class: `job${j.broken ? ' broken' : ''}${j.paused ? ' paused' : ''}`, data: { job: j.name } },
      h('th', { scope: 'row', class: 'name' }, h('a', { href: jobHref(j.name) }, j.name),
        j.broken && j.error ? h('div', { class: 'job-error', role: 'note' }, String(j.error)) : null),
      h('td', { class: 'mono sched' }, scheduleText(j)),
      h('td', { class: 'opt' }, j.timezone || (j.schedule ? 'UTC' : '–')),
      h('td', { class: 'next' }, j.next ? [h('span', { class: 'mono' }, zoned(j.next)), ' ', h('span', { class: 'rel muted', data: { t: nextT } }, rel(nextT))]
        : h('span', { class: 'muted' }, j.paused ? 'paused' : '–')),
      h('td', { class: 'last' }, last ? [stateBadge(last.state), ' ', runLink(j.name, String(last.run))]
        : h('span', { class: 'muted' }, 'no runs yet')),
      h('td', { class: 'state' }, jobState(j)),
      ctx.act ? h('td', { class: 'acts' }, actionButtons(j.name, j.paused)) : null);
  }

  // ---- runs

  function runRow(r, ctx) {
    const id = runId(r);
    const job = r.job || ctx.job;
    const kind = kindOf(r);
    return h('tr', { class: `run state-${r.state || 'unknown'}${FAILED.has(r.state) ? ' failed' : ''}`, data: { job, run: id, state: r.state } },
      h('td', { class: 'state' }, stateBadge(r.state), ctx.act && r.state === 'running' ? killButton(job, id) : null),
      ctx.job ? null : h('td', { class: 'name' }, h('a', { href: jobHref(job) }, job)),
      h('td', { class: 'id' }, runLink(job, id), kind ? h('span', { class: 'kind' }, kind) : null),
      h('td', { class: 'node' }, r.node || '–'),
      h('td', { class: 'num opt' }, r.attempt != null ? String(r.attempt) : '–'),
      h('td', { class: 'opt' }, timeEl(r.started)),
      durationCell(r),
      latenessCell(r),
      h('td', { class: 'err' }, r.error ? h('span', { class: 'err-text', title: String(r.error) }, String(r.error)) : ''));
  }

  const RUN_HEADS = (withJob) => [['State'], withJob ? ['Job'] : null, ['Run'], ['Node'], ['Attempt', 'num opt'], ['Started', 'opt'],
    ['Duration', 'num'], ['Lateness', 'num'], ['Error']].filter(Boolean);

  // ---- overview (#/)

  // The recent runs (GET /api/v1/runs, the newest by start time) and the
  // jobs' last runs (GET /api/v1/jobs) that are running but too old to be
  // among them (a long run on a busy cluster): the runs the overview lists.
  // The summary's "running now" and the nodes' Running column count the
  // running ones of this same list, so the three agree at every poll (the
  // nodes' own figures are published once a second, and counted only runs
  // executing in a worker: they disagreed with the list).
  function withRunningLast(runs, jobs) {
    const have = new Set(runs.map((r) => `${r.job}\u0000${runId(r)}`));
    const extra = [];
    for (const j of jobs || []) {
      const l = j.last && typeof j.last === 'object' ? j.last : null;
      if (!l || l.state !== 'running' || typeof l.run !== 'string' || have.has(`${j.name}\u0000${l.run}`)) continue;
      extra.push({ job: j.name, key: l.run, state: l.state, fire: l.fire, started: l.started, node: l.node, attempt: l.attempt });
    }
    extra.sort((a, b) => (num(b.started) || 0) - (num(a.started) || 0));
    return runs.concat(extra);
  }

  // {node name: running runs} of a list of runs.
  function runningByNode(runs) {
    const t = {};
    for (const r of runs) if (r.state === 'running') t[r.node || '?'] = (t[r.node || '?'] || 0) + 1;
    return t;
  }

  function overviewView() {
    const filter = h('input', {
      id: 'job-filter', type: 'search', placeholder: 'filter jobs', 'aria-label': 'Filter jobs by name, schedule or state', value: S.filter,
      oninput: (ev) => { S.filter = ev.target.value; if (view.lastJobs) renderJobs(view.lastJobs); },
    });
    const el = h('div', { class: 'overview' },
      h('div', { id: 'summary', class: 'summary', 'aria-label': 'Summary' }),
      section('nodes', 'Nodes', table('nodes', [['Node'], ['Version'], ['Running', 'num'], ['Labels'], ['Clock offset'], ['Uptime', 'opt']])),
      section('jobs', 'Jobs', h('div', { class: 'tools' }, filter),
        table('jobs', [['Job'], ['Schedule'], ['Zone', 'opt'], ['Next'], ['Last run'], ['State'], ['Actions', 'acts-head']])),
      section('runs', 'Recent runs', h('p', { class: 'hint' }, `The last ${RUNS_LIMIT} runs across jobs, and any older one still running; failures first. Lateness is start − instant.`),
        table('runs', RUN_HEADS(true))));
    const view = { name: 'overview', el, lastJobs: null };

    function renderJobs(jobs) {
      const q = S.filter.trim().toLowerCase();
      const match = (j) => !q || [j.name, scheduleText(j), j.timezone, j.broken ? 'broken' : '', j.paused ? 'paused' : 'active',
        j.last && j.last.state].some((s) => s && String(s).toLowerCase().includes(q));
      const shown = jobs.filter(match);
      const cut = shown.slice(0, JOB_ROWS_MAX);
      syncRows($('#jobs-body', el), cut, (j) => j.name, (j) => jobRow(j, { act: canAct() }), { act: canAct() });
      setEmpty('jobs', cut, jobs.length === 0 ? 'No jobs. Put one with: baton job put FILE' : 'No job matches the filter.');
      const broken = jobs.filter((j) => j.broken).length;
      const paused = jobs.filter((j) => j.paused).length;
      setCount('jobs', `${jobs.length}${broken ? ` · ${broken} broken` : ''}${paused ? ` · ${paused} paused` : ''}` +
        (shown.length > cut.length ? ` · showing ${cut.length} of ${shown.length}` : ''));
    }

    function renderRuns() {
      const runs = view.runs || [];
      const ctx = { act: canAct() };
      syncRows($('#runs-body', el), runs, (r) => `${r.job}\u0000${runId(r)}`, (r) => runRow(r, ctx), ctx);
      setEmpty('runs', runs, 'No runs yet.');
      const failed = runs.filter((r) => FAILED.has(r.state)).length;
      setCount('runs', `${runs.length}${failed ? ` · ${failed} failed` : ''}`);
    }

    function renderNodes() {
      const nodes = view.nodes || [];
      const ctx = { leader: S.info && S.info.leader, self: S.info && S.info.node, version: S.info && S.info.version,
        running: runningByNode(view.runs || []) };
      syncRows($('#nodes-body', el), nodes, (n) => n.name, (n) => nodeRow(n, ctx), ctx);
      setEmpty('nodes', nodes, 'No live node is registered.');
      setCount('nodes', String(nodes.length));
    }

    view.paths = () => {
      const p = { info: 'api/v1/info', nodes: 'api/v1/nodes', runs: `api/v1/runs?limit=${RUNS_LIMIT}` };
      // (a list of thousands of jobs is megabytes: not every 2 s)
      const big = view.lastJobs && view.lastJobs.length > BIG_JOB_LIST;
      if (!big || Date.now() - (view.jobsAt || 0) >= BIG_JOB_POLL_MS) p.jobs = 'api/v1/jobs';
      return p;
    };
    view.update = (d) => {
      if (d.jobs) {
        view.jobsAt = Date.now();
        view.lastJobs = Array.isArray(d.jobs) ? d.jobs.filter((j) => j && typeof j.name === 'string') : [];
        renderJobs(view.lastJobs);
      }
      if (d.runs) {
        const recent = Array.isArray(d.runs) ? d.runs.filter((r) => r && typeof r === 'object') : [];
        view.runs = failuresFirst(withRunningLast(recent, view.lastJobs));
        renderRuns();
      }
      if (d.nodes) view.nodes = Array.isArray(d.nodes) ? d.nodes.filter((n) => n && typeof n.name === 'string') : [];
      renderNodes();
      renderSummary(el, view);
      el.querySelector('.acts-head').hidden = !canAct();
    };
    view.rerender = () => {
      if (view.lastJobs) renderJobs(view.lastJobs);
      if (view.runs) renderRuns();
      el.querySelector('.acts-head').hidden = !canAct();
    };
    return view;
  }

  function renderSummary(el, view) {
    const nodes = view.nodes || [];
    const jobs = view.lastJobs || [];
    const runs = view.runs || [];
    const skewed = nodes.filter((n) => n.clock && n.clock.skewed === true).length;
    const stat = (id, label, value, sub, cls) => h('div', { class: `stat ${cls || ''}`, id },
      h('div', { class: 'stat-label' }, label), h('div', { class: 'stat-value' }, value), h('div', { class: 'stat-sub' }, sub));
    const failed = runs.filter((r) => FAILED.has(r.state)).length;
    const running = runs.filter((r) => r.state === 'running').length;
    const byNode = runningByNode(runs);
    const listed = new Set(nodes.map((n) => n.name));
    const onListed = nodes.filter((n) => byNode[n.name] > 0).length;
    const elsewhere = Object.keys(byNode).filter((k) => !listed.has(k)).reduce((a, k) => a + byNode[k], 0);
    const broken = jobs.filter((j) => j.broken).length;
    $('#summary', el).replaceChildren(
      stat('stat-nodes', 'Nodes', String(nodes.length),
        S.info && S.info.leader ? `leader ${S.info.leader}${skewed ? ` · ${skewed} clock skewed` : ''}` : 'no leader', !S.info || !S.info.leader || skewed ? 'warn' : ''),
      stat('stat-jobs', 'Jobs', String(jobs.length), `${broken} broken · ${jobs.filter((j) => j.paused).length} paused`, broken ? 'bad' : ''),
      stat('stat-busy', 'Running now', String(running),
        `on ${onListed} of ${nodes.length} nodes${elsewhere ? ` · ${elsewhere} on a node that left` : ''}`, ''),
      stat('stat-failed', 'Recent failures', String(failed), `of the last ${runs.length} runs`, failed ? 'bad' : 'good'));
  }

  // ---- job page (#/jobs/NAME)

  function jobView(name) {
    const el = h('div', { class: 'jobpage' },
      h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' }, h('a', { href: '#/' }, 'Cluster'), ' / ', h('span', null, 'job')),
      h('div', { class: 'page-head' }, h('h1', { id: 'job-title' }, name), h('span', { id: 'job-state', class: 'badges' }), h('span', { id: 'job-actions' })),
      h('div', { id: 'job-error', class: 'alert', role: 'note', hidden: true }),
      h('div', { class: 'cols' },
        h('section', { id: 'job-spec', class: 'card', 'aria-labelledby': 'job-spec-title' },
          h('div', { class: 'card-head' }, h('h2', { id: 'job-spec-title' }, 'Spec')), h('dl', { id: 'job-details', class: 'fields' })),
        h('section', { id: 'job-chart', class: 'card', 'aria-labelledby': 'job-chart-title' },
          h('div', { class: 'card-head' }, h('h2', { id: 'job-chart-title' }, 'Duration and lateness'), h('span', { class: 'count', id: 'chart-count' })),
          h('figure', { id: 'chart', class: 'chart' }))),
      section('history', 'History', h('p', { class: 'hint' }, `Newest first, up to ${HISTORY_LIMIT} runs.`), table('history', RUN_HEADS(false))),
      h('div', { class: 'stack' },
        section('source', 'Source', h('p', { class: 'hint' }, 'The job file as stored (baton job show, and GET /api/v1/jobs/NAME\'s source).'),
          h('pre', { id: 'job-source', class: 'source mono', tabindex: '0', 'aria-label': `Source of ${name}` })),
        section('versions', 'Versions', h('p', { class: 'hint' }, 'Each put, rm and rollback, newest first (baton job versions). Diff compares two of them.'),
          table('versions', [['Revision', 'num'], ['Time'], ['Author'], ['Op'], ['SHA-256', 'opt'], ['Checked', 'opt'], ['']]),
          h('form', { id: 'diff-form', class: 'diff-form', autocomplete: 'off', hidden: true },
            h('label', { for: 'diff-from' }, 'from'), h('select', { id: 'diff-from' }),
            h('label', { for: 'diff-to' }, 'to'), h('select', { id: 'diff-to' }),
            h('button', { type: 'submit', class: 'act', id: 'diff-show' }, 'Diff')),
          h('div', { id: 'job-diff', class: 'diff mono', role: 'region', 'aria-label': 'Diff', tabindex: '0', hidden: true }))));
    const view = { name: 'job', el, job: name };
    const enc = encodeURIComponent(name);
    view.paths = () => ({ info: 'api/v1/info', job: `api/v1/jobs/${enc}`, history: `api/v1/jobs/${enc}/runs?limit=${HISTORY_LIMIT}` });
    const renderHistory = () => {
      const runs = view.history || [];
      const ctx = { job: name, act: canAct() };
      syncRows($('#history-body', el), runs, (r) => runId(r), (r) => runRow(r, ctx), ctx);
    };
    view.update = (d) => {
      if (d.job) {
        view.lastJob = d.job;
        renderJobSpec(el, d.job);
        renderSource(el, view, d.job);
        // The version log changes with the stored revision: read it then
        // (it is checked against etcd's history, a read per version).
        if (d.job.revision !== view.versionsOf) {
          view.versionsOf = d.job.revision;
          loadVersions(el, view);
        }
      }
      if (d.history) {
        const runs = Array.isArray(d.history) ? d.history.filter((r) => r && typeof r === 'object') : [];
        view.history = runs;
        renderHistory();
        setEmpty('history', runs, 'No runs of this job yet.');
        setCount('history', String(runs.length));
        const sig = JSON.stringify(runs.slice(0, CHART_RUNS).map((r) => [runId(r), r.state, runDuration(r), runLateness(r)]));
        if (sig !== view.chartSig) {
          view.chartSig = sig;
          $('#chart', el).replaceChildren(...chart(name, runs.slice(0, CHART_RUNS).reverse()));
        }
      }
    };
    view.rerender = () => {
      if (view.lastJob) renderJobSpec(el, view.lastJob);
      if (view.history) renderHistory();
    };
    $('#diff-form', el).addEventListener('submit', (ev) => {
      ev.preventDefault();
      showDiff(el, name, $('#diff-from', el).value, $('#diff-to', el).value);
    });
    view.missing = (k, e) => {
      if (k !== 'job') return false;
      const err = $('#job-error', el);
      err.hidden = false;
      err.className = 'alert soft';
      err.replaceChildren(h('strong', null, 'No such job. '), `${e.message}. Its run records, if any, are below.`);
      $('#job-details', el).replaceChildren();
      $('#job-actions', el).replaceChildren();
      $('#job-state', el).replaceChildren(badge('not found', 'warn'));
      view.lastJob = null;
      renderSource(el, view, null);
      return true;
    };
    return view;
  }

  // The stored source, as text; set only when it changed (a selection in it
  // survives the polls).
  function renderSource(el, view, j) {
    const src = j && typeof j.source === 'string' ? j.source : null;
    if (src === view.source) return;
    view.source = src;
    const pre = $('#job-source', el);
    if (src === null) {
      pre.textContent = '';
      setCount('source', j ? 'not in the answer' : '');
      return;
    }
    pre.textContent = src;
    const lines = src === '' ? 0 : src.split('\n').length - (src.endsWith('\n') ? 1 : 0);
    setCount('source', `revision ${j.revision} · ${lines} line${lines === 1 ? '' : 's'}${j.signed_by ? ` · signed by ${j.signed_by}` : ''}`);
  }

  // GET .../versions into the versions table and the diff form's choices.
  async function loadVersions(el, view) {
    const name = view.job;
    let list;
    try {
      list = await api(`api/v1/jobs/${encodeURIComponent(name)}/versions`);
    } catch (e) {
      if (S.view !== view) return;
      $('#versions-body', el).replaceChildren();
      setEmpty('versions', [], e.status === 404 ? 'No versions.' : `Could not read the versions: ${e.message}`);
      view.versionsOf = e.status === 404 ? view.versionsOf : null; // (try again at the next poll)
      return;
    }
    if (S.view !== view) return;
    const vs = (Array.isArray(list) ? list : []).filter((v) => v && num(v.revision) !== null);
    const withSource = vs.filter((v) => v.op !== 'rm');
    const before = (v) => withSource.find((w) => w.revision < v.revision);
    syncRows($('#versions-body', el), vs, (v) => String(v.revision), (v) => {
      const prev = v.op !== 'rm' ? before(v) : null;
      return h('tr', { class: `version${v.current ? ' current' : ''}`, data: { revision: v.revision } },
        h('td', { class: 'num' }, String(v.revision), v.current ? [' ', badge('current', 'good')] : null),
        h('td', null, timeEl(v.time)),
        h('td', { class: 'author' }, v.author || 'unknown'),
        h('td', null, v.op || '–'),
        h('td', { class: 'mono small opt', title: v.sha256 || '' }, typeof v.sha256 === 'string' ? v.sha256.slice(0, 12) : '–'),
        h('td', { class: `opt${v.checked === 'mismatch' ? ' bad-text' : ''}` }, v.checked === 'mismatch' ? 'MISMATCH' : (v.checked || '–')),
        h('td', null, prev ? h('button', {
          type: 'button', class: 'act act-diff', data: { from: prev.revision, to: v.revision },
          'aria-label': `Diff revision ${prev.revision} to ${v.revision}`,
          onclick: () => {
            $('#diff-from', el).value = String(prev.revision);
            $('#diff-to', el).value = String(v.revision);
            showDiff(el, name, prev.revision, v.revision);
          },
        }, 'diff') : null));
    }, null);
    setEmpty('versions', vs, 'No versions.');
    setCount('versions', String(vs.length));
    const form = $('#diff-form', el);
    form.hidden = withSource.length < 2;
    for (const [id, pick] of [['#diff-from', withSource[1]], ['#diff-to', withSource[0]]]) {
      const sel = $(id, el);
      const was = sel.value;
      sel.replaceChildren(...withSource.map((v) => h('option', { value: v.revision }, `${v.revision}${v.current ? ' (current)' : ''}`)));
      sel.value = withSource.some((v) => String(v.revision) === was) ? was : (pick ? String(pick.revision) : '');
    }
  }

  // GET .../diff?from=&to= into the diff box, a line each, as text.
  async function showDiff(el, name, from, to) {
    const box = $('#job-diff', el);
    box.hidden = false;
    box.replaceChildren(h('p', { class: 'empty' }, `Comparing ${from} with ${to}…`));
    let d;
    try {
      d = await api(`api/v1/jobs/${encodeURIComponent(name)}/diff?from=${encodeURIComponent(from)}&to=${encodeURIComponent(to)}`);
    } catch (e) {
      box.replaceChildren(h('p', { class: 'empty bad-text' }, `Diff failed: ${e.message}`));
      return;
    }
    const text = d && typeof d.diff === 'string' ? d.diff : '';
    if (text === '') {
      box.replaceChildren(h('p', { class: 'empty' }, `Revisions ${from} and ${to} have the same source.`));
      return;
    }
    // (the "--- a" and "+++ b" lines come before the first hunk; in a hunk,
    // a removed Lua comment starts with "---" too)
    let inHunk = false;
    const lines = text.replace(/\n$/, '').split('\n');
    box.replaceChildren(...lines.map((l) => {
      if (l.startsWith('@@')) inHunk = true;
      const cls = !inHunk ? 'head' : l.startsWith('@@') ? 'hunk' : l.startsWith('+') ? 'add' : l.startsWith('-') ? 'del' : 'ctx';
      return h('div', { class: `dl ${cls}` }, l === '' ? ' ' : l);
    }));
  }

  function renderJobSpec(el, j) {
    const spec = j.spec && typeof j.spec === 'object' ? j.spec : null;
    $('#job-state', el).replaceChildren(...jobState(j));
    $('#job-actions', el).replaceChildren(canAct() ? actionButtons(j.name, j.paused, spec ? spec.params || null : null) : '');
    const err = $('#job-error', el);
    err.hidden = !j.broken;
    err.replaceChildren(...(j.broken ? [h('strong', null, 'Broken: '), String(j.error || 'the job does not load'),
      num(j.running_revision) !== null ? ` The nodes still run revision ${j.running_revision}.` : ''] : []));
    const rows = [];
    const add = (k, v) => { if (v != null && v !== '') rows.push(h('dt', null, k), h('dd', null, v)); };
    if (spec) {
      add('description', spec.description);
      add('schedule', spec.schedule ? h('span', { class: 'mono' }, spec.schedule) : (spec.queue ? `queue ${spec.queue}` : scheduleText(spec)));
      add('zone', spec.schedule ? spec.timezone || 'UTC' : null);
      const next = Array.isArray(j.next) ? j.next : [];
      add('next', spec.schedule ? (j.paused ? 'paused' : next.length ? h('ul', { class: 'plain' }, next.map((n) =>
        h('li', null, h('span', { class: 'mono' }, zoned(n)), ' ', h('span', { class: 'rel muted', data: { t: parseInstant(n) } }, rel(parseInstant(n)))))) : '–') : null);
      add('timeout', num(spec.timeout) !== null ? dur(spec.timeout) : null);
      add('concurrency', spec.concurrency);
      add('misfire', spec.misfire ? spec.misfire + (num(spec.starting_deadline) !== null ? ` (deadline ${dur(spec.starting_deadline)})` : '') : null);
      const r = spec.retry;
      add('retry', r && typeof r === 'object' ? (r.attempts ? `${r.attempts} more, backoff ${dur(r.backoff)} up to ${dur(r.max_backoff)}` : 'none') : null);
      add('shards', spec.shards > 1 ? String(spec.shards) : null);
      add('policy', spec.policy);
      add('on node loss', spec.on_node_loss);
      add('labels', labelChips(spec.labels));
      if (spec.params && Object.keys(spec.params).length) add('params', labelChips(spec.params));
    }
    add('revision', `${j.revision}${num(j.version) !== null ? ` (version ${j.version})` : ''}`);
    const st = Array.isArray(j.status) ? j.status : [];
    if (st.length) {
      add('loaded by', h('ul', { class: 'plain' }, st.map((s) => h('li', { class: s.error ? 'bad-text' : null },
        h('b', null, s.node || '?'), ` rev ${s.revision != null ? s.revision : '–'}`,
        s.revision != null && s.revision !== j.revision ? ' (stale)' : '', s.error ? `: ${s.error}` : ''))));
    }
    $('#job-details', el).replaceChildren(...rows);
  }

  // An inline SVG of the runs' duration and lateness (oldest left), one
  // point each, with a shared axis in seconds. A skipped run did not run: a
  // mark under the axis, no duration. Each point and mark links to its run.
  function chart(job, runs) {
    const W = 640, H = 252, L = 56, R = 14, T = 14, B = 42;
    const pts = runs.map((r, i) => ({ r, i, id: runId(r), d: runDuration(r), l: runLateness(r), skip: r.state === 'skipped' }));
    const vals = pts.flatMap((p) => [p.d, p.l]).filter((v) => v !== null);
    const skips = pts.filter((p) => p.skip).length;
    if (pts.length === 0 || (vals.length === 0 && skips === 0)) {
      setCount('chart', '');
      return [h('p', { class: 'empty' }, 'No finished runs to chart yet.')];
    }
    setCount('chart', `last ${pts.length} runs`);
    const step = niceStep(Math.max(...vals, 0.001) / 4);
    const max = step * Math.max(1, Math.ceil(Math.max(...vals, 0.001) / step - 1e-9));
    const x = (i) => (pts.length === 1 ? L + (W - L - R) / 2 : L + (i * (W - L - R)) / (pts.length - 1));
    const y = (v) => T + (H - T - B) * (1 - v / max);
    const g = svg('svg', {
      class: 'chart-svg', viewBox: `0 0 ${W} ${H}`, role: 'img', preserveAspectRatio: 'xMidYMid meet',
      'aria-labelledby': 'chart-desc',
    });
    g.append(svg('desc', { id: 'chart-desc' }, `Duration and lateness of the last ${pts.length} runs of ${job}, oldest on the left, up to ${dur(max)}` +
      `${skips ? `; ${skips} skipped, marked under the axis` : ''}.`));
    const grid = svg('g', { class: 'grid-lines' });
    for (let v = 0; v <= max + step / 2; v += step) {
      grid.append(svg('line', { x1: L, x2: W - R, y1: y(v), y2: y(v) }),
        svg('text', { x: L - 6, y: y(v) + 4, 'text-anchor': 'end', class: 'tick' }, v === 0 ? '0' : tick(v)));
    }
    g.append(grid);
    const first = pts[0].r, lastR = pts[pts.length - 1].r;
    const tlabel = (r) => clock(num(r.started) !== null ? r.started : r.fire);
    g.append(svg('text', { x: L, y: H - 6, class: 'tick' }, tlabel(first)),
      svg('text', { x: W - R, y: H - 6, 'text-anchor': 'end', class: 'tick' }, tlabel(lastR)));
    if (skips) g.append(svg('text', { x: L - 6, y: H - B + 16, 'text-anchor': 'end', class: 'tick' }, 'skipped'));
    // One path per series, broken where a run has no value (a skipped run
    // is no gap: the line goes on from the run before it to the one after).
    const series = [['duration', (p) => p.d], ['lateness', (p) => p.l]];
    for (const [name, get] of series) {
      let dpath = '';
      let pen = false;
      for (const p of pts) {
        if (p.skip) continue;
        const v = get(p);
        if (v === null) { pen = false; continue; }
        dpath += `${pen ? 'L' : 'M'}${x(p.i).toFixed(1)},${y(v).toFixed(1)}`;
        pen = true;
      }
      if (dpath) g.append(svg('path', { class: `series line-${name}`, d: dpath }));
    }
    const dots = svg('g', { class: 'points' });
    const skipY = H - B + 12; // the skipped runs' lane, under the axis
    for (const p of pts) {
      const tip = p.skip ? `${p.id}: skipped${p.r.error ? ` (${p.r.error})` : ''}`
        : `${p.id}: ${p.r.state || '?'}, duration ${dur(p.d)}${p.l !== null ? `, lateness ${dur(p.l)}` : ''}${p.r.node ? ` on ${p.r.node}` : ''}`;
      const a = svg('a', { href: runHref(job, p.id), class: 'pt-link' }, svg('title', null, tip));
      if (p.skip) {
        const cx = x(p.i), k = 3.5;
        a.append(svg('path', { class: 'pt pt-skipped', d: `M${(cx - k).toFixed(1)},${(skipY - k).toFixed(1)}l${2 * k},${2 * k}m0,${-2 * k}l${-2 * k},${2 * k}`, data: { run: p.id } }));
      }
      const bad = FAILED.has(p.r.state) ? ' pt-failed' : '';
      if (p.d !== null) a.append(svg('circle', { class: `pt pt-duration${bad}`, cx: x(p.i).toFixed(1), cy: y(p.d).toFixed(1), r: 3.5, data: { run: p.id } }));
      if (p.l !== null) a.append(svg('rect', { class: `pt pt-lateness${bad}`, x: (x(p.i) - 3).toFixed(1), y: (y(p.l) - 3).toFixed(1), width: 6, height: 6, data: { run: p.id } }));
      dots.append(a);
    }
    g.append(dots);
    const legend = h('figcaption', { class: 'legend' },
      h('span', { class: 'key key-duration' }, 'duration'), h('span', { class: 'key key-lateness' }, 'lateness (start − instant)'),
      h('span', { class: 'key key-failed' }, 'failed run'), skips ? h('span', { class: 'key key-skipped' }, `skipped (did not run): ${skips}`) : null);
    return [g, legend];
  }

  // The smallest of 1, 2, 5 x 10^k at or above v: a tick step.
  function niceStep(v) {
    const e = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 5, 10]) if (m * e >= v * (1 - 1e-9)) return m * e;
    return 10 * e;
  }

  // A tick label: 0.5ms, 20ms, 1.5s, 2m (steps are round numbers).
  function tick(v) {
    if (v < 1) return `${Number((v * 1000).toPrecision(3))}ms`;
    if (v < 60) return `${Number(v.toPrecision(3))}s`;
    return dur(v);
  }

  // ---- run page (#/runs/JOB/ID)

  function runView(job, id) {
    const el = h('div', { class: 'runpage' },
      h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' }, h('a', { href: '#/' }, 'Cluster'), ' / ', h('a', { href: jobHref(job) }, job), ' / ', h('span', null, 'run')),
      h('div', { class: 'page-head' }, h('h1', { id: 'run-title' }, h('span', { class: 'muted' }, `${job} `), h('span', { class: 'mono' }, id)), h('span', { id: 'run-state', class: 'badges' }), h('span', { id: 'run-actions', class: 'actions' })),
      h('div', { id: 'run-error', class: 'alert', role: 'note', hidden: true }),
      h('div', { class: 'cols' },
        h('section', { id: 'run', class: 'card', 'aria-labelledby': 'run-rec-title' },
          h('div', { class: 'card-head' }, h('h2', { id: 'run-rec-title' }, 'Record')), h('dl', { id: 'run-record', class: 'fields' }),
          h('details', { class: 'raw' }, h('summary', null, 'raw JSON'), h('pre', { id: 'run-raw', class: 'mono' }))),
        h('section', { id: 'attempts', class: 'card', 'aria-labelledby': 'attempts-title' },
          h('div', { class: 'card-head' }, h('h2', { id: 'attempts-title' }, 'Attempts')),
          table('attempts', [['#', 'num'], ['State'], ['Node'], ['Started'], ['Duration', 'num'], ['Error']]))),
      section('output', 'Output', h('p', { class: 'hint' }, 'The kept output of the run: print, io.write, ctx.log and the programs it started (capped per attempt).'),
        h('div', { id: 'run-output', class: 'output', role: 'log', 'aria-label': 'Run output', tabindex: '0' })));
    const view = { name: 'run', el, job, id };
    const encId = id.split('/').map(encodeURIComponent).join('/');
    view.paths = () => ({ info: 'api/v1/info', run: `api/v1/runs/${encodeURIComponent(job)}/${encId}` });
    view.update = (d) => {
      if (!d.run) return;
      const sig = JSON.stringify(d.run) + canAct();
      if (sig === view.sig) return;
      view.sig = sig;
      view.run = d.run;
      el.classList.remove('not-found');
      renderRun(el, job, d.run);
    };
    view.rerender = () => { if (view.run) view.update({ run: view.run }); };
    view.missing = (k, e) => {
      if (k !== 'run') return false;
      view.sig = null;
      view.run = null;
      $('#run-actions', el).replaceChildren();
      el.classList.add('not-found');
      const err = $('#run-error', el);
      err.hidden = false;
      err.className = 'alert soft';
      err.replaceChildren(h('strong', null, 'No such run. '),
        `${e.message}. The cluster keeps the newest records of each job (baton node --history N).`);
      $('#run-state', el).replaceChildren(badge('not found', 'warn'));
      return true;
    };
    return view;
  }

  function renderRun(el, job, r) {
    $('#run-state', el).replaceChildren(stateBadge(r.state), kindOf(r) ? badge(kindOf(r), 'neutral') : '');
    $('#run-actions', el).replaceChildren(canAct() && r.state === 'running' ? killButton(job, runId(r)) : '');
    const err = $('#run-error', el);
    err.hidden = !r.error;
    err.className = `alert${FAILED.has(r.state) ? '' : ' soft'}`;
    err.replaceChildren(...(r.error ? [h('strong', null, 'Error: '), String(r.error)] : []));
    const rows = [];
    const add = (k, v) => { if (v != null && v !== '') rows.push(h('dt', null, k), h('dd', null, v)); };
    add('state', stateBadge(r.state));
    add('node', r.node);
    add('attempt', r.attempt != null ? String(r.attempt) : null);
    add(r.manual ? 'requested' : r.task ? 'claimed' : r.event ? 'triggered' : 'instant', num(r.fire) !== null ? h('span', { class: 'mono' }, iso(r.fire).replace('.000Z', 'Z')) : null);
    add('started', num(r.started) !== null ? [timeEl(r.started), ' ', h('span', { class: 'rel muted', data: { t: r.started } }, rel(r.started))] : null);
    add('finished', num(r.finished) !== null ? timeEl(r.finished) : null);
    const d = runDuration(r);
    add('duration', d !== null ? dur(d) : (r.state === 'running' && num(r.started) !== null ? h('span', { class: 'since', data: { t: r.started } }, sinceText(r.started)) : null));
    const l = runLateness(r);
    add('lateness', l !== null ? `${dur(l)} (start − instant)` : null);
    add('retry at', num(r.retry_at) !== null ? timeEl(r.retry_at) : null);
    add('killed by', r.killed_by);
    add('code revision', r.code_revision != null ? String(r.code_revision) : null);
    add('fence', r.fence != null ? String(r.fence) : null);
    add('shard', r.shard != null ? String(r.shard) : null);
    add('task', r.task);
    if (r.params && typeof r.params === 'object' && Object.keys(r.params).length) add('params', labelChips(r.params));
    if (r.event && typeof r.event === 'object') {
      const ev = r.event;
      add('started by', ev.job ? h('a', { href: runHref(String(ev.job), String(ev.id || '')) }, `${ev.job} ${ev.id || ''} (${ev.state || '?'})`) : null);
    }
    $('#run-record', el).replaceChildren(...rows);
    const raw = Object.assign({}, r);
    delete raw.output;
    $('#run-raw', el).textContent = JSON.stringify(raw, null, 2);

    const atts = (Array.isArray(r.attempts) ? r.attempts : []).filter((a) => a && typeof a === 'object');
    if (atts.length === 0 && r.attempt) atts.push({ attempt: r.attempt, state: r.state, node: r.node, started: r.started, finished: r.finished, error: r.error });
    syncRows($('#attempts-body', el), atts, (a) => String(a.attempt), (a) => h('tr', { class: `attempt state-${a.state}`, data: { attempt: a.attempt } },
      h('td', { class: 'num' }, String(a.attempt != null ? a.attempt : '?')), h('td', null, stateBadge(a.state)), h('td', null, a.node || '–'),
      h('td', null, timeEl(a.started)), h('td', { class: 'num' }, num(a.started) !== null && num(a.finished) !== null ? dur(a.finished - a.started) : '–'),
      h('td', { class: 'err' }, a.error ? h('span', { class: 'err-text', title: String(a.error) }, String(a.error)) : '')), null);
    setEmpty('attempts', atts, 'No attempt has started.');

    renderOutput($('#run-output', el), Array.isArray(r.output) ? r.output : null);
  }

  // Output lines as `baton job logs --json` prints them: {attempt, n, t,
  // stream, text, level?, fields?, cmd?} or {dropped, cap}.
  function renderOutput(box, lines) {
    const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 8;
    if (!lines || lines.length === 0) {
      box.replaceChildren(h('p', { class: 'empty' }, lines ? 'This run kept no output.' : 'No output in the answer.'));
      return;
    }
    const multi = new Set(lines.map((l) => l && l.attempt)).size > 1;
    let lastAttempt = null;
    const out = [];
    for (const l of lines) {
      if (!l || typeof l !== 'object') continue;
      if (multi && l.attempt !== lastAttempt) {
        out.push(h('div', { class: 'line attempt-head' }, `attempt ${l.attempt}`));
        lastAttempt = l.attempt;
      }
      if (l.dropped) {
        out.push(h('div', { class: 'line dropped' }, `… ${l.dropped} line${l.dropped === 1 ? '' : 's'} dropped (the output of an attempt is capped${num(l.cap) ? ` at ${Math.round(l.cap / 1024)} KiB` : ''}) …`));
        continue;
      }
      const stream = String(l.stream || 'stdout');
      const tag = stream === 'log' ? String(l.level || 'log') : stream;
      const text = l.text != null ? String(l.text) : (l.line != null ? String(l.line) : '');
      const fields = l.fields && typeof l.fields === 'object'
        ? Object.keys(l.fields).map((k) => `${k}=${typeof l.fields[k] === 'string' ? l.fields[k] : JSON.stringify(l.fields[k])}`).join(' ') : '';
      out.push(h('div', { class: `line stream-${stream.replace(/[^a-z]/gi, '')}${l.level ? ` level-${String(l.level).replace(/[^a-z]/gi, '')}` : ''}` },
        h('span', { class: 'lt' }, num(l.t) !== null ? clock(l.t) : ''),
        h('span', { class: 'ls' }, tag),
        l.cmd ? h('span', { class: 'lc' }, `[${l.cmd}]`) : null,
        h('span', { class: 'lx' }, text, fields ? h('span', { class: 'lf' }, `  ${fields}`) : null)));
    }
    box.replaceChildren(...out);
    if (atBottom) box.scrollTop = box.scrollHeight;
  }

  // --------------------------------------------------------------- routing

  function parseRoute() {
    const hash = location.hash.replace(/^#\/?/, '');
    const parts = hash.split('/');
    const dec = (s) => { try { return decodeURIComponent(s); } catch (_) { return s; } };
    if (parts[0] === 'jobs' && parts[1]) return { name: 'job', job: dec(parts[1]) };
    if (parts[0] === 'runs' && parts[1] && parts.length > 2) return { name: 'run', job: dec(parts[1]), id: parts.slice(2).map(dec).join('/') };
    return { name: 'overview' };
  }

  function route() {
    const r = parseRoute();
    const key = JSON.stringify(r);
    if (S.route === key && S.view) return;
    S.route = key;
    S.view = r.name === 'job' ? jobView(r.job) : r.name === 'run' ? runView(r.job, r.id) : overviewView();
    document.title = r.name === 'job' ? `${r.job} · baton` : r.name === 'run' ? `${r.job} ${r.id} · baton` : 'baton';
    const main = $('#view');
    $('#notice').hidden = true;
    main.replaceChildren(S.view.el);
    main.dataset.view = r.name;
    window.scrollTo(0, 0);
    poll(true);
  }

  function rerender() {
    if (S.view && S.view.rerender) S.view.rerender();
  }

  // ---------------------------------------------------------------- polling

  // One poll of the current view's paths; the next is scheduled POLL_MS
  // after it ends (not while the tab is hidden). now=true polls at once.
  async function poll(now) {
    clearTimeout(S.timer);
    S.timer = null;
    if (document.hidden) { setLive('paused', 'paused (tab hidden)'); return; }
    if (S.polling) { S.again = true; return; }
    S.polling = true;
    const view = S.view;
    try {
      const { data, errors } = await fetchAll(view.paths());
      if (data.info && typeof data.info === 'object') {
        S.info = data.info;
        if (num(data.info.time) !== null) S.skew = data.info.time - Date.now() / 1000;
      }
      renderHeader();
      if (view === S.view) {
        // A 404 of what the page is about (a removed job, a pruned run) is
        // said on the page, not in the banner.
        for (const [k, e] of Object.entries(errors)) {
          if (e.status === 404 && view.missing && view.missing(k, e)) delete errors[k];
        }
        view.update(data);
      }
      reportErrors(errors);
      const all = Object.keys(errors).length === 0;
      if (all) S.lastOk = nowSec();
      if (all) setLive('ok', `live · updated ${clock(nowSec())}`);
      else setLive('bad', S.lastOk ? `stale since ${clock(S.lastOk)}` : 'no data');
      tickRelative();
    } catch (e) {
      // A bug in rendering must not stop the polling: say it.
      showBanner('error', [h('strong', null, 'Dashboard error. '), String(e && e.message ? e.message : e)]);
      if (window.console) console.error(e);
    } finally {
      S.polling = false;
      if (S.again) { S.again = false; poll(true); } else if (!document.hidden) S.timer = setTimeout(() => poll(false), POLL_MS);
    }
  }

  // ------------------------------------------------------------------ start

  function start() {
    loadToken();
    bindToken();
    renderHeader();
    window.addEventListener('hashchange', () => {
      if (/(?:^#|[&?])token=/.test(location.hash)) { loadToken(); renderHeader(); }
      route();
    });
    document.addEventListener('visibilitychange', () => {
      if (document.hidden) { clearTimeout(S.timer); S.timer = null; setLive('paused', 'paused (tab hidden)'); } else poll(true);
    });
    setInterval(() => {
      if (document.hidden) return;
      tickRelative();
      for (const el of document.querySelectorAll('.rel-up[data-t]')) el.textContent = dur(nowSec() - Number(el.dataset.t));
    }, 1000);
    route();
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
