'use strict';
// Everything shown is data: nodes are built with text only, never parsed
// as markup (no HTML-parsing sink at all), so a body holding <script> is
// text.
(() => {
  const REFRESH_MS = 3000;
  const OUTCOMES = ['all', 'normalized', 'rejected', 'output_invalid', 'cut', 'stitched', 'passed'];
  const $ = (id) => document.getElementById(id);
  let selected = null;
  let filter = 'all';
  let latest = [];
  let timer = null;
  // The admin token, asked once and kept in this tab's session storage
  // (gone when the tab closes); every data request carries it.
  const TOKEN_KEY = 'probity-admin-token';

  class Refused extends Error {}

  async function authed(url) {
    const token = sessionStorage.getItem(TOKEN_KEY);
    const headers = token ? { authorization: 'Bearer ' + token } : {};
    const response = await fetch(url, { cache: 'no-store', headers });
    if (response.status === 401) {
      let message = 'the admin token is needed';
      try { message = (await response.json()).error.message; } catch (_) { /* keep the default */ }
      if (token) sessionStorage.removeItem(TOKEN_KEY);
      ask(message);
      throw new Refused(message);
    }
    return response;
  }

  function ask(message) {
    clearTimeout(timer);
    $('login-note').textContent = message;
    $('login').hidden = false;
    $('token').focus();
  }

  $('login').addEventListener('submit', (event) => {
    event.preventDefault();
    const token = $('token').value.trim();
    if (!token) return;
    sessionStorage.setItem(TOKEN_KEY, token);
    $('token').value = '';
    $('login').hidden = true;
    refresh();
  });

  function el(tag, className, ...children) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    for (const child of children) {
      if (child !== null && child !== undefined) node.append(child);
    }
    return node;
  }

  const count = (n) => (typeof n === 'number' ? n.toLocaleString('en-US') : '–');
  const rate = (n, of) => (of > 0 ? (100 * n / of).toFixed(1) + '%' : '–');

  function duration(seconds) {
    const d = Math.floor(seconds / 86400), h = Math.floor(seconds % 86400 / 3600);
    const m = Math.floor(seconds % 3600 / 60), s = seconds % 60;
    if (d > 0) return d + 'd ' + h + 'h';
    if (h > 0) return h + 'h ' + m + 'm';
    return m > 0 ? m + 'm ' + s + 's' : s + 's';
  }

  function clock(time) {
    const date = new Date(time);
    if (Number.isNaN(date.getTime())) return String(time);
    const ago = Math.max(0, Math.round((Date.now() - date.getTime()) / 1000));
    return date.toLocaleTimeString('en-GB') + ' (' + duration(ago) + ' ago)';
  }

  function what(capture) {
    if (capture.pointers && capture.pointers.length) return capture.pointers.join(', ');
    if (capture.invariant) return capture.invariant;
    if (capture.reasons && capture.reasons.length) return capture.reasons.join(', ');
    return '';
  }

  function renderProcess(probity) {
    const ready = $('ready');
    ready.textContent = probity.ready ? 'ready' : 'draining';
    ready.className = 'badge ' + (probity.ready ? 'ok' : 'bad');
    $('uptime').textContent = 'up ' + duration(probity.uptime_seconds) + ' · version ' + probity.version;
  }

  function renderRoutes(routes) {
    const rows = routes.map((r) => {
      const c = r.by_class || {};
      const cells = [
        el('td', 'route', el('code', null, r.route),
          r.prefix ? el('div', 'where', r.prefix + ' → ' + r.upstream + ' (' + r.dialect + ')') : null),
        el('td', 'n', count(r.requests)), el('td', 'n', count(c['2xx'])), el('td', 'n', count(c['3xx'])),
        el('td', 'n', count(c['4xx'])), el('td', 'n', count(c['5xx'])), el('td', 'n', count(r.errors)),
        el('td', r.errors > 0 ? 'n warn' : 'n', rate(r.errors, r.requests)),
        el('td', 'n', count(r.normalized)), el('td', 'n', count(r.rejected)),
        el('td', 'n', count(r.outputs_judged)), el('td', 'n', count(r.invalid_outputs)),
        el('td', r.invalid_outputs > 0 ? 'n warn' : 'n', rate(r.invalid_outputs, r.outputs_judged)),
      ];
      const row = el('tr', null, ...cells);
      row.dataset.route = r.route;
      return row;
    });
    $('routes').tBodies[0].replaceChildren(...rows);
    $('routes-empty').hidden = rows.length > 0;
  }

  function renderFilters() {
    const buttons = OUTCOMES.map((outcome) => {
      const n = outcome === 'all' ? latest.length : latest.filter((c) => c.outcome === outcome).length;
      const button = el('button', null, outcome.replace('_', ' ') + ' ' + n);
      button.type = 'button';
      button.setAttribute('aria-pressed', String(outcome === filter));
      button.addEventListener('click', () => { filter = outcome; renderCaptures(); });
      return button;
    });
    $('filters').replaceChildren(...buttons);
  }

  function renderCaptures() {
    renderFilters();
    const shown = latest.filter((c) => filter === 'all' || c.outcome === filter);
    const rows = shown.map((capture) => {
      const row = el('tr', capture.request_id === selected ? 'selected' : null,
        el('td', null, clock(capture.time)),
        el('td', null, el('code', null, capture.route)),
        el('td', 'outcome ' + String(capture.outcome).replace(/[^a-z_]/g, ''), capture.outcome),
        el('td', 'what', el('code', null, what(capture))),
        el('td', 'n', String(capture.upstream_status)),
        el('td', null, el('code', null, capture.request_id)));
      row.tabIndex = 0;
      row.dataset.requestId = capture.request_id;
      row.dataset.outcome = capture.outcome;
      const open = () => select(capture.request_id);
      row.addEventListener('click', open);
      row.addEventListener('keydown', (e) => { if (e.key === 'Enter') open(); });
      return row;
    });
    $('captures').tBodies[0].replaceChildren(...rows);
    $('captures-count').textContent = shown.length + ' of the latest ' + latest.length;
  }

  async function refresh() {
    clearTimeout(timer);
    try {
      const response = await authed('status.json');
      if (!response.ok) throw new Error('status.json: ' + response.status);
      const status = await response.json();
      renderProcess(status.probity);
      renderRoutes(status.routes || []);
      latest = status.captures || [];
      renderCaptures();
      const note = $('captures-note');
      note.hidden = !status.captures_note;
      note.textContent = status.captures_note || '';
      $('refreshed').textContent = 'updated ' + new Date().toLocaleTimeString('en-GB');
    } catch (err) {
      if (err instanceof Refused) {
        $('ready').textContent = 'locked';
        $('ready').className = 'badge bad';
        return;
      }
      $('ready').textContent = 'unreachable';
      $('ready').className = 'badge bad';
      $('refreshed').textContent = String(err && err.message ? err.message : err);
    }
    if ($('live').checked) timer = setTimeout(refresh, REFRESH_MS);
  }

  function runs(pre, list, side) {
    const marks = [];
    const nodes = list.map((run) => {
      if (run.pointer === null || run.pointer === undefined) return document.createTextNode(run.text);
      const mark = el('mark', 'nulled', run.text);
      mark.title = run.pointer + (side === 'left' ? ': malformed, sent as is by the upstream' : ': nulled by probity');
      mark.dataset.pointer = run.pointer;
      mark.dataset.index = String(marks.length);
      marks.push(mark);
      return mark;
    });
    pre.classList.remove('absent');
    pre.replaceChildren(...nodes);
    return marks;
  }

  function pair(left, right) {
    left.forEach((mark, i) => {
      const twin = right[i];
      if (!twin) return;
      for (const [a, b] of [[mark, twin], [twin, mark]]) {
        a.addEventListener('mouseenter', () => { a.classList.add('active'); b.classList.add('active'); reveal(b); });
        a.addEventListener('mouseleave', () => { a.classList.remove('active'); b.classList.remove('active'); });
      }
    });
  }

  // Scrolls a pane (not the page) so that a highlighted figure is in view.
  function reveal(mark) {
    const pane = mark.closest('pre');
    const top = mark.offsetTop - pane.clientHeight / 3;
    if (mark.offsetTop < pane.scrollTop || mark.offsetTop > pane.scrollTop + pane.clientHeight - 20) {
      pane.scrollTop = Math.max(0, top);
    }
  }

  function absent(pre, text) {
    pre.classList.add('absent');
    pre.replaceChildren(document.createTextNode(text));
  }

  function renderMeta(capture, view) {
    const fields = [
      ['time', capture.time], ['route', capture.route], ['endpoint', capture.endpoint],
      ['dialect', capture.dialect], ['outcome', capture.outcome],
      ['upstream status', capture.upstream_status], ['content type', view.content_type || '–'],
      ['body bytes', count(capture.body_bytes)], ['invariant', capture.invariant || '–'],
      ['reasons', (capture.reasons || []).join(', ') || '–'],
      ['pointers', (capture.pointers || []).join(', ') || '–'],
      ['contradicting', (capture.relations || []).join(', ') || '–'],
      ['sha-256', capture.body_sha256 || '–'], ['instance', capture.instance],
    ];
    $('detail-meta').replaceChildren(...fields.map(([name, value]) => {
      const dd = el('dd', null, el('code', null, String(value)));
      dd.title = String(value);
      return el('div', null, el('dt', null, name), dd);
    }));
  }

  function renderDetail(view) {
    const capture = view.capture || {};
    $('detail-id').textContent = capture.request_id;
    $('detail-raw').dataset.requestId = capture.request_id;
    renderMeta(capture, view);
    const note = $('detail-note');
    note.hidden = !view.note;
    note.textContent = view.note || '';
    $('detail-unlocated').replaceChildren(...(view.unlocated || []).map((u) =>
      el('li', null, el('code', null, u.pointer), ': ' + u.why)));
    const left = view.verbatim && view.verbatim.length ? runs($('left'), view.verbatim, 'left') : [];
    if (!view.verbatim || !view.verbatim.length) absent($('left'), view.note || 'no body');
    let right = [];
    if (view.delivered) right = runs($('right'), view.delivered, 'right');
    else absent($('right'), view.note || 'not shown');
    $('exact').textContent = view.delivered
      ? (left.length ? left.length + ' figure' + (left.length > 1 ? 's' : '') + ' nulled' : 'unchanged')
      : '';
    pair(left, right);
    $('detail').hidden = false;
    for (const pre of [$('left'), $('right')]) pre.scrollTop = 0;
    if (left[0]) reveal(left[0]);
    if (right[0]) reveal(right[0]);
  }

  async function select(requestId) {
    selected = requestId;
    renderCaptures();
    try {
      const response = await authed('view.json?id=' + encodeURIComponent(requestId));
      const view = await response.json();
      if (!response.ok) throw new Error(view.error || String(response.status));
      if (selected !== requestId) return;
      renderDetail(view);
      $('detail').scrollIntoView({ block: 'start' });
    } catch (err) {
      $('detail').hidden = false;
      const note = $('detail-note');
      note.hidden = false;
      note.textContent = String(err && err.message ? err.message : err);
    }
  }

  // The raw body needs the token too, so it is fetched, then shown as plain
  // text in a new tab: whatever its upstream content type, nothing in it runs.
  $('detail-raw').addEventListener('click', async (event) => {
    event.preventDefault();
    const id = event.currentTarget.dataset.requestId;
    if (!id) return;
    const tab = window.open('', '_blank');
    try {
      const response = await authed('captures/' + encodeURIComponent(id));
      const blob = new Blob([await response.arrayBuffer()], { type: 'text/plain; charset=utf-8' });
      if (tab) tab.location = URL.createObjectURL(blob);
    } catch (err) {
      if (tab) tab.close();
    }
  });

  $('live').addEventListener('change', () => { if ($('live').checked) refresh(); else clearTimeout(timer); });
  refresh();
})();
