// Nodes & Capacity: renders /api/fleet and follows /api/fleet/events (Server-Sent Events).
//
// Rules kept here:
// - data is written with textContent and attributes, never parsed as HTML;
// - a number is shown as current only while the stream is alive: on a stream error, or when no
//   event or heartbeat arrived for STALE_AFTER_MS, the page says so and greys the numbers out;
// - when the controller says its numbers are not live (a standby, or starting), none are shown;
// - the tenants lists a reader opened stay open across updates;
// - a drain, a move and a blocked move are said in words (badges, lines), never by colour alone;
// - when any node has a zone, the nodes are grouped by zone (zones by name, then the nodes with
//   none), each group under a row naming it; otherwise they stay one list in name order.
'use strict';

(function () {
  const STALE_AFTER_MS = 6000;
  const RECONNECT_MS = 3000;
  const POLL_MS = 2000;
  const DIMENSIONS = [
    { key: 'threads', title: 'Threads', unit: 'threads', long: 'threads' },
    { key: 'memoryGb', title: 'Memory', unit: 'GB', long: 'GB memory' },
    { key: 'storageGb', title: 'Storage', unit: 'GB', long: 'GB storage' },
  ];
  const STATES = ['Online', 'Cordoned', 'Offline', 'Draining'];
  const PHASES = ['Active', 'Pending', 'PendingCapacity', 'Resizing', 'Migrating', 'Suspended', 'Terminating'];
  const number = new Intl.NumberFormat('en-US');
  const $ = (id) => document.getElementById(id);

  let lastSeen = 0; // client clock (ms) of the last event, heartbeat or poll answer
  let lastView = null; // the last FleetView shown
  let stale = false;
  let source = null;
  const openNodes = new Set();

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (name === 'class') node.className = value;
      else if (name === 'text') node.textContent = value;
      else node.setAttribute(name, value === true ? '' : String(value));
    }
    for (const child of children.flat(Infinity)) {
      if (child === undefined || child === null || child === false) continue;
      node.append(typeof child === 'string' ? document.createTextNode(child) : child);
    }
    return node;
  }

  const fmt = (n) => number.format(n);
  const slug = (s) => String(s).toLowerCase().replace(/[^a-z0-9]+/g, '-');

  function clock(iso) {
    const date = new Date(iso);
    if (Number.isNaN(date.getTime())) return '?';
    return date.toLocaleTimeString('en-GB', { hour12: false });
  }

  function dateTime(iso) {
    const date = new Date(iso);
    if (Number.isNaN(date.getTime())) return '?';
    return date.toLocaleString('en-GB', { hour12: false, dateStyle: 'medium', timeStyle: 'medium' });
  }

  function duration(ms) {
    const s = Math.max(0, Math.round(ms / 1000));
    if (s < 60) return `${s} s`;
    const m = Math.floor(s / 60);
    if (m < 60) return `${m} min`;
    const h = Math.floor(m / 60);
    if (h < 48) return `${h} h ${m % 60} min`;
    return `${Math.floor(h / 24)} days`;
  }

  // A bar of allocated against capacity, its label, and the free amount.
  function meter(owner, dimension, allocated, capacity, free) {
    const over = allocated > capacity;
    const share = capacity > 0 ? allocated / capacity : (allocated > 0 ? 1 : 0);
    const percent = Math.round(share * 100);
    const used = `${fmt(allocated)} of ${fmt(capacity)} ${dimension.unit}`;
    const label = `${owner} ${dimension.title.toLowerCase()}: ${fmt(allocated)} of ${fmt(capacity)} ` +
      `${dimension.long} allocated (${percent}%), ${fmt(free)} free` + (over ? ', over capacity' : '');
    const fill = el('span', { class: 'fill' });
    // CSSOM, not a style attribute: the Content-Security-Policy allows no inline style.
    fill.style.width = `${allocated > 0 ? Math.max(Math.min(share, 1) * 100, 1.5) : 0}%`;
    const level = over ? 'over' : share >= 0.85 ? 'high' : 'ok';
    return el('div', { class: 'meter', 'data-dim': dimension.key },
      el('div', {
        class: `bar ${level}`, role: 'meter', 'aria-valuemin': 0, 'aria-valuemax': capacity,
        'aria-valuenow': allocated, 'aria-valuetext': used, 'aria-label': label, title: label,
      }, fill),
      el('p', { class: 'amount' },
        el('span', { class: 'used num', text: used }),
        el('span', { class: 'free num', text: over ? `over by ${fmt(allocated - capacity)}` : `${fmt(free)} free` })));
  }

  function badge(text, kind) {
    return el('span', { class: `badge ${kind}`, text });
  }

  function renderPolicy(view) {
    $('policy-name').textContent = view.policy.name;
    $('policy-rule').textContent = view.policy.rule;
  }

  const amounts = (r) => `${fmt(r.threads)} threads · ${fmt(r.memoryGb)} GB memory · ${fmt(r.storageGb)} GB storage`;
  const plural = (n, one, many) => `${fmt(n)} ${n === 1 ? one : many}`;

  function renderTotals(totals, nodes) {
    $('nodes-total').textContent = fmt(totals.nodes);
    const states = $('nodes-by-state');
    const byState = STATES.concat(Object.keys(totals.nodesByState).filter((s) => !STATES.includes(s)))
      .map((state) => [state, totals.nodesByState[state] || 0])
      .filter(([state, n]) => n > 0 || state === 'Online');
    states.replaceChildren(...byState.map(([state, n]) =>
      el('li', { class: `chip state-${slug(state)}${n === 0 ? ' zero' : ''}` }, el('span', { class: 'num', text: fmt(n) }), ` ${state}`)));
    if (totals.overCapacityNodes > 0) {
      states.append(el('li', { class: 'chip over' }, el('span', { class: 'num', text: fmt(totals.overCapacityNodes) }), ' over capacity'));
    }
    if (totals.unreadableNodes > 0) {
      states.append(el('li', { class: 'chip over' }, el('span', { class: 'num', text: fmt(totals.unreadableNodes) }), ' unreadable'));
    }
    const deleting = nodes.filter((n) => n.beingDeleted).length;
    if (deleting > 0) {
      states.append(el('li', { class: 'chip state-draining' }, el('span', { class: 'num', text: fmt(deleting) }), ' being deleted'));
    }
    for (const dimension of DIMENSIONS) {
      const card = $(`card-${dimension.key}`);
      const allocated = totals.allocated[dimension.key];
      const capacity = totals.capacity[dimension.key];
      const free = totals.free[dimension.key];
      const placeable = totals.placeable[dimension.key];
      card.replaceChildren(
        el('h3', { text: dimension.title }),
        meter('Fleet', dimension, allocated, capacity, free),
        el('p', {
          class: 'placeable',
          title: 'Free on Online nodes that are not over capacity: the only room placement can use',
        }, el('span', { class: 'num', text: `${fmt(placeable)} ${dimension.unit}` }), ' placeable'));
    }
    $('tenants-total').textContent = fmt(totals.tenants);
    const phases = PHASES.concat(Object.keys(totals.tenantsByPhase).filter((p) => !PHASES.includes(p)))
      .map((phase) => [phase, totals.tenantsByPhase[phase] || 0])
      .filter(([, n]) => n > 0);
    $('tenants-by-phase').replaceChildren(...phases.map(([phase, n]) =>
      el('li', { class: `chip phase-${slug(phase)}` }, el('span', { class: 'num', text: fmt(n) }), ` ${phase}`)));
    if (totals.blockedMoves > 0) {
      $('tenants-by-phase').append(el('li', { class: 'chip over' }, el('span', { class: 'num', text: fmt(totals.blockedMoves) }), ' cannot move'));
    }
  }

  function renderOverCapacity(nodes) {
    const over = nodes.filter((n) => n.overCapacity);
    const box = $('over-capacity');
    box.hidden = over.length === 0;
    box.replaceChildren(...over.map((n) => el('p', { class: 'over-item', 'data-over': n.name },
      el('strong', { text: `${n.name} is over capacity: ` }),
      n.overCapacityMessage || 'it holds more than its capacity; it keeps its tenants and takes no new ones.')));
  }

  // What a draining node's row says under its name: whether it is drained yet.
  function drainNote(node) {
    const doing = node.beingDeleted ? 'being deleted' : 'draining';
    let text;
    if (node.drained && node.drained.status === 'True') text = `${doing}: drained, holds nothing`;
    else if (node.tenants.length > 0) text = `${doing}: ${plural(node.tenants.length, 'tenant remains', 'tenants remain')}`;
    else text = `${doing}: its tenants are moved to other nodes`;
    return el('span', { class: 'drain-note', text, title: node.drained ? node.drained.message : null });
  }

  function renderDraining(nodes) {
    const draining = nodes.filter((n) => n.draining);
    const box = $('draining');
    box.hidden = draining.length === 0;
    box.replaceChildren(...draining.map((n) => el('p', { class: 'drain-item', 'data-draining': n.name },
      el('strong', { text: `${n.name} is ${n.beingDeleted ? 'being deleted' : 'draining'}` +
        (n.drained ? ` (Drained: ${n.drained.status}): ` : ': ') }),
      n.drained ? n.drained.message
        : 'it takes no new tenants and its tenants are moved to other nodes, make-before-break.')));
  }

  function tenantItem(t) {
    return el('li', { 'data-tenant': t.tenant },
      el('span', { class: 'tn', text: t.tenant }), ' ',
      t.phase ? badge(t.phase, `phase-${slug(t.phase)}`) : badge('tenant gone: being released', 'muted'),
      t.movingTo ? [' ', badge(`moving to ${t.movingTo}`, 'move')] : null,
      t.movingFrom ? [' ', badge(`moving from ${t.movingFrom}`, 'move')] : null,
      t.moveBlocked ? [' ', badge('cannot move: no room elsewhere', 'over')] : null,
      t.replicas ? [' ', badge(plural(t.replicas, 'replica', 'replicas') + ' here', 'muted')] : null,
      el('span', { class: 'res num', text: `${fmt(t.resources.threads)} threads · ${fmt(t.resources.memoryGb)} GB · ${fmt(t.resources.storageGb)} GB` }));
  }

  function tenantList(node) {
    if (node.tenants.length === 0) return el('span', { class: 'none', text: 'none' });
    const count = (f) => node.tenants.filter(f).length;
    const notes = [
      [count((t) => t.movingTo), 'moving out'],
      [count((t) => t.movingFrom), 'moving in'],
      [count((t) => t.moveBlocked), 'cannot move'],
    ].filter(([n]) => n > 0).map(([n, what]) => ` · ${fmt(n)} ${what}`).join('');
    const details = el('details', { 'data-node': node.name },
      el('summary', { text: plural(node.tenants.length, 'tenant', 'tenants') + notes }),
      el('ul', { class: 'tenants' }, ...node.tenants.map(tenantItem)));
    details.open = openNodes.has(node.name);
    details.addEventListener('toggle', () => {
      if (details.open) openNodes.add(node.name); else openNodes.delete(node.name);
    });
    return details;
  }

  function nodeRow(node) {
    const classes = [`state-${slug(node.state)}`];
    if (node.overCapacity) classes.push('over');
    if (node.draining) classes.push('draining');
    const drainedMessage = node.drained ? node.drained.message : null;
    const state = badge(node.state, `state-${slug(node.state)}`);
    if (node.state === 'Draining' && drainedMessage) state.title = drainedMessage;
    const name = el('th', { scope: 'row', 'data-label': 'Node' },
      el('span', { class: 'node-name', text: node.name }), ' ', state);
    if (node.beingDeleted) {
      const deleting = badge('Being deleted', 'state-draining');
      if (drainedMessage) deleting.title = drainedMessage;
      name.append(' ', deleting);
    }
    if (node.overCapacity) name.append(' ', badge('over capacity', 'over'));
    if (node.draining) name.append(drainNote(node));
    else if (!node.takesNewTenants && !node.error) name.append(el('span', { class: 'takes-none', text: 'takes no new tenants' }));
    if (node.error) {
      return el('tr', { class: classes.join(' '), 'data-node': node.name }, name,
        el('td', { colspan: 4, class: 'error', text: `Cannot show this node: ${node.error}` }));
    }
    const cells = DIMENSIONS.map((d) => el('td', { 'data-label': d.title },
      meter(node.name, d, node.allocated[d.key], node.capacity[d.key], node.free[d.key])));
    return el('tr', { class: classes.join(' '), 'data-node': node.name }, name, ...cells,
      el('td', { 'data-label': 'Tenants', class: 'tenants-cell' }, tenantList(node)));
  }

  // The node rows, under a row per zone when any node has one (zones by name, then no zone).
  function nodeRows(nodes) {
    if (!nodes.some((n) => n.zone)) return nodes.map(nodeRow);
    const zones = new Map();
    for (const node of nodes) {
      const zone = node.zone || '';
      if (!zones.has(zone)) zones.set(zone, []);
      zones.get(zone).push(node);
    }
    const names = [...zones.keys()].sort((a, b) => (a === '') - (b === '') || (a < b ? -1 : a > b ? 1 : 0));
    return names.flatMap((zone) => {
      const members = zones.get(zone);
      const title = zone ? `Zone ${zone}` : 'No zone';
      const head = el('tr', { class: 'zone-head', 'data-zone': zone },
        el('th', { colspan: 5, scope: 'colgroup' }, el('strong', { text: title }),
          ` · ${plural(members.length, 'node', 'nodes')}`));
      return [head, ...members.map(nodeRow)];
    });
  }

  // A spread tenant and where each of its replicas is.
  function spreadItem(t) {
    const over = t.spread === 'Zones' ? 'spread over zones' : 'each on its own node';
    const where = t.placements.length === 0
      ? 'holds none: its replicas are placed all or none'
      : t.placements.map((p) => `${p.node}${p.zone ? ` (${p.zone})` : ''} × ${fmt(p.replicas)}`).join(', ');
    return el('li', { class: 'move-item', 'data-spread': t.tenant },
      el('span', { class: 'tn', text: t.tenant }), ' ', badge(t.phase, `phase-${slug(t.phase)}`),
      el('span', { class: 'move-path', text: ` ${plural(t.replicas, 'replica', 'replicas')}, ${over}: ` }),
      el('span', { class: 'res', text: where }));
  }

  // Needs, free and shortfall per dimension, as measured by the controller's page.
  function shortfallTable(s, caption) {
    const rows = DIMENSIONS.map((d) => {
      const short = s.shortBy[d.key];
      return el('tr', { class: short > 0 ? 'short' : 'fits', 'data-dim': d.key },
        el('th', { scope: 'row', text: d.title }),
        el('td', { class: 'num', text: fmt(s.requested[d.key]) }),
        el('td', { class: 'num', text: fmt(s.available[d.key]) }),
        el('td', { class: 'num', text: short > 0 ? `short by ${fmt(short)}` : 'fits' }));
    });
    return el('table', { class: 'shortfall' },
      el('caption', { text: caption }),
      el('thead', {}, el('tr', {},
        el('th', { scope: 'col', text: 'Dimension' }), el('th', { scope: 'col', text: 'Needs' }),
        el('th', { scope: 'col', text: 'Free' }), el('th', { scope: 'col', text: 'Shortfall' }))),
      el('tbody', {}, ...rows));
  }

  function eligibleCaption(s) {
    return s.eligibleNodes === 0
      ? 'No node takes new tenants: none is Online and within its capacity'
      : `Most free on any node that takes new tenants (${plural(s.eligibleNodes, 'node', 'nodes')})`;
  }

  function waitingItem(w, generatedAt) {
    const since = w.createdAt
      ? `waiting since ${dateTime(w.createdAt)} (${duration(Date.parse(generatedAt) - Date.parse(w.createdAt))})`
      : 'waiting';
    const head = el('div', { class: 'w-head' },
      el('span', { class: 'tn', text: w.tenant }), ' ', badge(w.phase, `phase-${slug(w.phase)}`),
      w.node ? el('span', { class: 'on-node', text: ` on ${w.node}` }) : null,
      el('span', { class: 'since', text: since }));
    const info = el('div', { class: 'w-info' }, head);
    const item = el('li', { class: 'waiting-item', 'data-pending': w.tenant }, info);
    if (w.requested) {
      const asks = `${fmt(w.requested.threads)} threads · ${fmt(w.requested.memoryGb)} GB memory · ${fmt(w.requested.storageGb)} GB storage`;
      info.append(el('p', { class: 'asks' }, w.phase === 'Resizing' ? 'Wants ' : 'Asks for ', el('span', { class: 'num', text: asks })));
    }
    if (w.message) info.append(el('p', { class: 'message' }, el('span', { class: 'label', text: 'Last status message: ' }), w.message));
    const s = w.shortfall;
    if (s) {
      const against = s.against === 'ownNode'
        ? `Room on ${w.node}, counting its own reservation`
        : eligibleCaption(s);
      item.append(shortfallTable(s, against));
    }
    return item;
  }

  function moveItem(m) {
    return el('li', { class: 'move-item', 'data-move': m.tenant },
      el('span', { class: 'tn', text: m.tenant }), ' ', badge('Migrating', 'phase-migrating'),
      el('span', { class: 'move-path' }, ' moving from ', el('strong', { text: m.from }), ' to ', el('strong', { text: m.to })),
      el('span', { class: 'res num', text: `reserved on both until the move completes: ${amounts(m.resources)}` }));
  }

  function requestItem(r) {
    const item = el('li', { class: 'move-item', 'data-request': r.name },
      el('span', { class: 'tn', text: r.name }), ' ', badge(r.phase, `phase-${slug(r.phase)}`),
      el('span', { class: 'move-path' }, ' a ', el('strong', { text: r.class }),
        r.node ? ' is Node ' : '', r.node ? el('strong', { text: r.node }) : '',
        ` for ${r.tenants.join(', ') || 'no tenant now'}`),
      el('span', { class: 'res num', text: amounts(r.capacity) }));
    if (r.message) item.append(el('span', { class: 'message', text: ` ${r.message}` }));
    return item;
  }

  function blockedItem(b) {
    const head = el('div', { class: 'w-head' },
      el('span', { class: 'tn', text: b.tenant }), ' ', badge(b.phase, `phase-${slug(b.phase)}`), ' ',
      badge('cannot move', 'over'),
      el('span', { class: 'on-node', text: ` on ${b.node}, which is draining` }));
    const info = el('div', { class: 'w-info' }, head,
      el('p', { class: 'asks' }, 'Holds ', el('span', { class: 'num', text: amounts(b.reserved) })));
    if (b.message) info.append(el('p', { class: 'message' }, el('span', { class: 'label', text: 'Last status message: ' }), b.message));
    const item = el('li', { class: 'waiting-item', 'data-blocked': b.tenant }, info);
    if (b.shortfall) item.append(shortfallTable(b.shortfall, eligibleCaption(b.shortfall)));
    return item;
  }

  // Consolidation and make-room: one line per node consolidated, node kept, and room made.
  function disruptionItems(d) {
    const items = [];
    for (const c of d.consolidating || []) {
      const cost = c.monthlyCost === null || c.monthlyCost === undefined ? 'cost unknown' : `saves ${fmt(c.monthlyCost)} a month`;
      items.push(el('li', { class: 'move-item', 'data-consolidating': c.node },
        el('span', { class: 'tn', text: c.node }), ' ', badge('Consolidating', 'phase-migrating'),
        el('span', { class: 'move-path', text: ` being emptied to go back: ${fmt(c.tenants)} tenant(s) left; ${cost}` })));
    }
    for (const k of d.kept || []) {
      items.push(el('li', { class: 'move-item', 'data-kept': k.node },
        el('span', { class: 'tn', text: k.node }), ' ', badge('Kept', 'phase-pending'),
        el('span', { class: 'move-path', text: ` could be freed; kept: ${k.why} (${k.reason}, freeable for ${fmt(k.freeableSeconds)} s)` })));
    }
    for (const r of d.rooms || []) {
      const moves = r.moves.map((m) => `${m.tenant} to ${m.to}`).join(', ');
      items.push(el('li', { class: 'move-item', 'data-room': r.waiter },
        el('span', { class: 'tn', text: r.waiter }), ' ', badge('Room being made', 'phase-migrating'),
        el('span', { class: 'move-path' }, ' on ', el('strong', { text: r.node }), `: moving ${moves}`)));
    }
    return items;
  }

  // What the last capacity tick judged each class's machines to be used for, and the Nodes
  // labelled for a request that does not own them (never handed back for it).
  function machinesLines(d) {
    const lines = (d && d.machines || []).map((m) => {
      const uses = `${fmt(m.inUse)} in use, ${fmt(m.idle)} idle, ${fmt(m.awaited)} awaited, ${fmt(m.orphaned)} orphaned`;
      const less = m.deliversLess ? `; its Nodes deliver ${amounts(m.deliversLess)}, less than it promises` : '';
      return el('li', { class: 'move-item', 'data-machines': m.class },
        el('span', { class: 'tn', text: m.class }), el('span', { class: 'move-path', text: `: ${uses}${less}` }));
    });
    for (const s of d && d.strays || []) {
      lines.push(el('li', { class: 'move-item', 'data-stray': s.node },
        el('span', { class: 'tn', text: s.node }), ' ', badge('Not its request\'s', 'over'),
        el('span', { class: 'move-path', text: ` is labelled for ${s.labelledFor}, which does not own it: never handed back for it` })));
    }
    return lines;
  }

  function renderDisruption(d) {
    const machines = machinesLines(d);
    $('machines').replaceChildren(...machines);
    $('machines').hidden = machines.length === 0;
    if (machines.length > 0) $('requests-section').hidden = false;
    const items = d ? disruptionItems(d) : [];
    renderList('disruption-section', 'disruption-count', 'disruption', items);
    const saving = d && (d.savingMonthly > 0 || d.savedMonthly > 0)
      ? `Monthly cost saved: ${fmt(d.savedMonthly)} handed back, ${fmt(d.savingMonthly)} more once the nodes being consolidated go back.`
      : '';
    $('disruption-saving').textContent = saving;
    $('disruption-saving').hidden = saving === '';
    if (saving !== '') $('disruption-section').hidden = false;
  }

  // A section that lists items and is hidden while it has none.
  function renderList(section, count, list, items) {
    $(section).hidden = items.length === 0;
    $(count).textContent = `(${fmt(items.length)})`;
    $(list).replaceChildren(...items);
  }

  function render(view) {
    const main = $('main');
    const focused = document.activeElement && document.activeElement.closest
      ? document.activeElement.closest('details[data-node]') : null;
    const focusedNode = focused ? focused.getAttribute('data-node') : null;
    lastView = view;
    main.classList.remove('waiting-for-data');
    main.removeAttribute('aria-busy');
    renderPolicy(view);
    const notLive = $('not-live');
    main.classList.toggle('not-live', !view.live);
    notLive.hidden = view.live;
    notLive.textContent = view.live ? '' : `No live numbers from this replica (${view.role}). ${view.message}`;
    if (view.live && view.totals) {
      renderTotals(view.totals, view.nodes);
      renderOverCapacity(view.nodes);
      renderDraining(view.nodes);
      $('nodes-count').textContent = `(${fmt(view.nodes.length)})`;
      $('node-rows').replaceChildren(...nodeRows(view.nodes));
      $('no-nodes').hidden = view.nodes.length > 0;
      $('waiting-count').textContent = `(${fmt(view.waiting.length)})`;
      $('waiting').replaceChildren(...view.waiting.map((w) => waitingItem(w, view.generatedAt)));
      $('no-waiting').hidden = view.waiting.length > 0;
      renderList('moves-section', 'moves-count', 'moves', (view.moves || []).map(moveItem));
      renderList('requests-section', 'requests-count', 'requests', (view.requests || []).map(requestItem));
      renderList('blocked-section', 'blocked-count', 'blocked', (view.blocked || []).map(blockedItem));
      renderList('spread-section', 'spread-count', 'spread', (view.spread || []).map(spreadItem));
      renderDisruption(view.disruption);
    } else {
      $('over-capacity').hidden = true;
      $('draining').hidden = true;
      $('node-rows').replaceChildren();
      $('waiting').replaceChildren();
      renderList('moves-section', 'moves-count', 'moves', []);
      renderList('requests-section', 'requests-count', 'requests', []);
      renderList('blocked-section', 'blocked-count', 'blocked', []);
      renderList('spread-section', 'spread-count', 'spread', []);
      renderDisruption(null);
    }
    if (focusedNode) {
      const again = document.querySelector(`details[data-node="${CSS.escape(focusedNode)}"] summary`);
      if (again) again.focus();
    }
  }

  function showFreshness() {
    const fresh = $('freshness');
    if (!lastView) {
      fresh.textContent = 'No data yet.';
      return;
    }
    fresh.textContent = `Generation ${lastView.generation}, made ${clock(lastView.generatedAt)} by the controller` +
      (stale ? ' — NOT CURRENT' : '') + '.';
  }

  function setConnection(kind, text) {
    const pill = $('connection');
    pill.className = `connection ${kind}`;
    pill.textContent = text;
  }

  function markFresh() {
    lastSeen = Date.now();
    stale = false;
    $('main').classList.remove('stale');
    $('stale').hidden = true;
    document.title = 'Nodes & Capacity · tenant-placer';
    if (lastView && lastView.live) setConnection('live', `Live · updated ${clock(lastView.generatedAt)}`);
    else if (lastView) setConnection('not-live', `Connected · not live (${lastView.role})`);
    showFreshness();
  }

  function markStale(reason) {
    const first = !stale;
    stale = true;
    $('main').classList.add('stale');
    const box = $('stale');
    box.hidden = false;
    const since = lastView ? ` The numbers below are from ${clock(lastView.generatedAt)} and may be out of date: they are greyed out until the controller answers again.` : '';
    box.textContent = `${reason}${since}`;
    document.title = 'Not current · Nodes & Capacity';
    setConnection('lost', 'Not current: no connection');
    if (first) showFreshness();
  }

  function onFleet(event) {
    let view;
    try {
      view = JSON.parse(event.data);
    } catch (error) {
      return;
    }
    render(view);
    markFresh();
  }

  function onHeartbeat(event) {
    let beat = {};
    try {
      beat = JSON.parse(event.data);
    } catch (error) {
      // a heartbeat is a heartbeat whatever it carries
    }
    if (!lastView) return;
    // A heartbeat may not confirm numbers older than its generation: the next event brings them.
    if (typeof beat.generation === 'number' && beat.generation !== lastView.generation) {
      lastSeen = Date.now();
      return;
    }
    markFresh();
  }

  function connect() {
    if (!window.EventSource) {
      poll();
      return;
    }
    setConnection('connecting', stale ? 'Reconnecting…' : 'Connecting…');
    source = new EventSource('api/fleet/events');
    source.addEventListener('fleet', onFleet);
    source.addEventListener('heartbeat', onHeartbeat);
    source.addEventListener('error', () => {
      if (source.readyState === EventSource.CLOSED) {
        markStale('The controller refused or dropped the live connection; retrying.');
        source = null;
        setTimeout(connect, RECONNECT_MS);
      } else {
        markStale('Lost the connection to the controller; reconnecting.');
      }
    });
  }

  // Without EventSource: ask for the whole fleet every POLL_MS.
  function poll() {
    fetch('api/fleet', { cache: 'no-store' })
      .then((response) => {
        if (!response.ok) throw new Error(`HTTP ${response.status}`);
        return response.json();
      })
      .then((view) => { render(view); markFresh(); })
      .catch(() => markStale('Cannot reach the controller.'))
      .finally(() => setTimeout(poll, POLL_MS));
  }

  // The watchdog: silence is as bad as an error.
  setInterval(() => {
    if (lastSeen && Date.now() - lastSeen > STALE_AFTER_MS) {
      markStale(`No word from the controller for ${duration(Date.now() - lastSeen)}.`);
    } else if (!lastSeen && !stale && performance.now() > STALE_AFTER_MS) {
      markStale('No answer from the controller yet.');
    }
  }, 1000);

  connect();
})();
