// tenure dashboard: asks api/locks every interval and draws its table.
// Read-only; every text goes in through textContent, never as HTML.
'use strict';

(function () {
  const params = new URLSearchParams(location.search);
  const state = { sort: params.get('sort'), all: params.get('all') === '1', timer: null };
  const body = document.body;
  const status = document.getElementById('status');
  const head = document.querySelector('#locks thead tr');
  const rows = document.querySelector('#locks tbody');
  const empty = document.getElementById('empty');
  const all = document.getElementById('all');
  all.checked = state.all;
  all.addEventListener('change', function () { state.all = all.checked; refresh(); });

  function say(what, text) {
    body.dataset.state = what;
    status.textContent = text;
  }

  function drawHead(table, sort) {
    head.replaceChildren(...table.columns.map(function (name) {
      const th = document.createElement('th');
      th.textContent = name;
      const by = table.sorts[name];
      if (by) {
        th.dataset.sort = by;
        if (by === sort) th.className = 'sorted';
        th.addEventListener('click', function () { state.sort = by; refresh(); });
      }
      return th;
    }));
  }

  function draw(data) {
    document.getElementById('where').textContent =
      data.server + '  prefix ' + data.prefix + '  pattern ' + data.pattern;
    document.getElementById('interval').textContent = String(data.interval);
    const at = new Date(data.time * 1000).toLocaleTimeString();
    if (data.error) {
      say('error', 'server unreachable: ' + data.error + ' (retrying; last table below) at ' + at);
      return;
    }
    state.sort = data.sort;
    drawHead(data.table, data.sort);
    rows.replaceChildren(...data.table.rows.map(function (row) {
      const tr = document.createElement('tr');
      tr.dataset.key = row.key;
      tr.dataset.kind = row.kind;
      for (const cell of row.cells) {
        const td = document.createElement('td');
        td.textContent = cell;
        tr.appendChild(td);
      }
      return tr;
    }));
    empty.textContent = data.all ? 'no lock found' : 'no lock held';
    empty.hidden = data.table.rows.length > 0;
    const hidden = data.all ? '' : ' (free ones hidden)';
    let text = data.shown + ' shown of ' + data.total + hidden + ', sort ' + data.sort + ', at ' + at;
    if (data.skipped.length) text += '; skipped: ' + data.skipped.join('; ');
    say('ok', text);
  }

  async function refresh() {
    clearTimeout(state.timer);
    let wait = 1000;
    try {
      const query = new URLSearchParams();
      if (state.sort) query.set('sort', state.sort);
      if (state.all) query.set('all', '1');
      const answer = await fetch('api/locks?' + query, { cache: 'no-store' });
      if (!answer.ok) throw new Error('HTTP ' + answer.status);
      const data = await answer.json();
      // (a timer longer than setTimeout's limit, 2^31 - 1 ms, about 24.8 days,
      // would fire at once: every refresh would ask again straight away)
      wait = Math.min(data.interval * 1000, 2147483647);
      draw(data);
    } catch (err) {
      say('down', 'the dashboard does not answer (' + err.message + '); retrying');
    }
    state.timer = setTimeout(refresh, wait);
  }

  refresh();
})();
