// pubmesh dashboard: renders the node's event stream (dashboard/events) into the page.
// Every text from the node is set with textContent, never parsed as HTML.
"use strict";

(function () {
  const HISTORY = 180; // points per chart (one per round)
  const SVG = "http://www.w3.org/2000/svg";
  const histories = { nodes: new Map(), links: new Map() };
  const elements = { clusters: new Map(), nodes: new Map(), links: new Map(), streams: new Map(), accounts: new Map() };

  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function plain(value, digits) {
    if (value === null || value === undefined) return "–";
    return digits ? Number(value).toFixed(digits) : String(value);
  }

  function human(value, unit) {
    if (value === null || value === undefined) return "–";
    const steps = ["", "k", "M", "G", "T"];
    let v = Number(value);
    let i = 0;
    while (Math.abs(v) >= 1000 && i < steps.length - 1) { v /= 1000; i += 1; }
    return (i ? v.toFixed(1) : String(Math.round(v * 10) / 10)) + " " + steps[i] + (unit || "");
  }

  function clock(seconds) {
    return seconds ? new Date(seconds * 1000).toLocaleTimeString() : "";
  }

  function remember(map, key, point) {
    let points = map.get(key);
    if (!points) { points = []; map.set(key, points); }
    if (points.length && points[points.length - 1][0] === point[0]) points.pop(); // (same round)
    points.push(point);
    if (points.length > HISTORY) points.splice(0, points.length - HISTORY);
  }

  // A small chart of messages per second in (blue) and out (orange); a gap where a rate is unknown.
  function chart(points, width, height) {
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("class", "chart");
    svg.setAttribute("width", width);
    svg.setAttribute("height", height);
    svg.setAttribute("viewBox", "0 0 " + width + " " + height);
    let max = 0;
    for (const p of points) for (const v of [p[1], p[2]]) if (v !== null && v > max) max = v;
    const top = max > 0 ? max : 1;
    const step = width / (HISTORY - 1);
    const offset = HISTORY - points.length;
    for (const [index, cls] of [[1, "in"], [2, "out"]]) {
      let d = "";
      let pen = false;
      points.forEach((p, i) => {
        const v = p[index];
        if (v === null || v === undefined) { pen = false; return; }
        const x = (offset + i) * step;
        const y = height - 2 - (v / top) * (height - 12);
        d += (pen ? "L" : "M") + x.toFixed(1) + " " + y.toFixed(1);
        pen = true;
      });
      const path = document.createElementNS(SVG, "path");
      path.setAttribute("class", cls);
      path.setAttribute("d", d || "M0 0");
      svg.appendChild(path);
    }
    const label = document.createElementNS(SVG, "text");
    label.setAttribute("x", "2");
    label.setAttribute("y", "9");
    label.textContent = "max " + human(max, "msg/s");
    svg.appendChild(label);
    return svg;
  }

  // -- nodes, grouped by cluster ----------------------------------------------------------------

  const NODE_METRICS = [
    ["msgs_in_rate", "msgs in/s", (v) => plain(v, 1)],
    ["msgs_out_rate", "msgs out/s", (v) => plain(v, 1)],
    ["bytes_in_rate", "bytes in/s", (v) => human(v, "B")],
    ["bytes_out_rate", "bytes out/s", (v) => human(v, "B")],
    ["connections", "conns", (v) => plain(v)],
    ["subscriptions", "subs", (v) => plain(v)],
    ["slow_consumers", "slow", (v) => plain(v)],
    ["mem", "mem", (v) => human(v, "B")],
    ["cpu", "cpu %", (v) => plain(v, 1)],
    ["routes", "route conns", (v) => plain(v)],
    ["gateways", "gateways", (v) => plain(v)],
  ];

  function nodeElement(name) {
    let item = elements.nodes.get(name);
    if (item) return item;
    const root = el("div", { class: "node", "data-node": name, "data-state": "up" });
    const title = el("div", { class: "title" });
    title.appendChild(el("span", {}, name));
    const badge = el("span", { class: "badge" });
    title.appendChild(badge);
    root.appendChild(title);
    const since = el("div", { class: "since muted" });
    root.appendChild(since);
    const dl = el("dl");
    const values = {};
    for (const [key, label] of NODE_METRICS) {
      dl.appendChild(el("dt", {}, label));
      values[key] = el("dd", { "data-metric": key }, "–");
      dl.appendChild(values[key]);
    }
    root.appendChild(dl);
    const plot = el("div", { class: "plot" });
    root.appendChild(plot);
    item = { root, badge, since, values, plot };
    elements.nodes.set(name, item);
    return item;
  }

  function clusterElement(name) {
    let item = elements.clusters.get(name);
    if (item) return item;
    const root = el("div", { class: "cluster", "data-cluster": name });
    root.appendChild(el("h3", {}, "cluster " + (name || "(none)")));
    const nodes = el("div", { class: "nodes" });
    root.appendChild(nodes);
    item = { root, nodes };
    elements.clusters.set(name, item);
    document.getElementById("clusters").appendChild(root);
    return item;
  }

  function renderNodes(snapshot) {
    for (const cluster of snapshot.clusters) {
      const c = clusterElement(cluster.name);
      for (const name of cluster.nodes) {
        const item = nodeElement(name);
        if (item.root.parentNode !== c.nodes) c.nodes.appendChild(item.root);
      }
    }
    for (const node of snapshot.nodes) {
      const item = nodeElement(node.name);
      remember(histories.nodes, node.name, [snapshot.time, node.msgs_in_rate ?? null, node.msgs_out_rate ?? null]);
      item.root.setAttribute("data-state", node.state);
      item.badge.textContent = node.state;
      item.since.textContent = node.state === "down"
        ? "down since " + clock(node.since) + ", last answered " + clock(node.last_seen)
        : "up since " + clock(node.since) + (node.start ? " · started " + clock(node.start) : "");
      for (const [key, , format] of NODE_METRICS) item.values[key].textContent = format(node[key]);
      item.plot.replaceChildren(chart(histories.nodes.get(node.name) || [], 270, 44));
    }
  }

  // -- links, streams, accounts, events ---------------------------------------------------------

  function row(map, key, attrs, cells, tbody) {
    let item = map.get(key);
    if (!item) {
      const tr = el("tr", attrs);
      const tds = {};
      for (const [name, metric] of cells) {
        tds[name] = el("td", metric ? { "data-metric": name } : { class: name });
        tr.appendChild(tds[name]);
      }
      item = { tr, tds };
      map.set(key, item);
    }
    tbody.appendChild(item.tr); // (re-appended in the snapshot's order)
    return item;
  }

  const LINK_CELLS = [["link"], ["kind"], ["state"], ["msgs_in_rate", true], ["msgs_out_rate", true],
    ["bytes_in_rate", true], ["bytes_out_rate", true], ["pending", true], ["connections", true], ["plot"]];

  function renderLinks(snapshot) {
    const tbody = document.querySelector("#links tbody");
    for (const link of snapshot.links) {
      remember(histories.links, link.link, [snapshot.time, link.msgs_in_rate ?? null, link.msgs_out_rate ?? null]);
      const item = row(elements.links, link.link, { "data-link": link.link }, LINK_CELLS, tbody);
      item.tr.setAttribute("data-state", link.state);
      const t = item.tds;
      t.link.textContent = link.link;
      t.kind.textContent = link.kind || "";
      t.state.textContent = link.state === "down" ? "down since " + clock(link.since) : "up";
      t.msgs_in_rate.textContent = plain(link.msgs_in_rate, 1);
      t.msgs_out_rate.textContent = plain(link.msgs_out_rate, 1);
      t.bytes_in_rate.textContent = human(link.bytes_in_rate, "B");
      t.bytes_out_rate.textContent = human(link.bytes_out_rate, "B");
      t.pending.textContent = plain(link.pending);
      t.connections.textContent = plain(link.connections);
      t.plot.replaceChildren(chart(histories.links.get(link.link) || [], 160, 26));
    }
  }

  const STREAM_CELLS = [["stream"], ["server"], ["where"], ["length", true], ["bytes", true],
    ["groups", true], ["pending", true], ["lag", true], ["last_id"]];

  function renderStreams(snapshot) {
    const tbody = document.querySelector("#streams tbody");
    const seen = new Set();
    for (const s of snapshot.streams) {
      const key = s.server + "\u0000" + s.account + "\u0000" + s.db + "\u0000" + s.name;
      seen.add(key);
      const item = row(elements.streams, key, { "data-stream": s.name, "data-server": s.server }, STREAM_CELLS, tbody);
      const t = item.tds;
      t.stream.textContent = s.name;
      t.server.textContent = s.server;
      t.where.textContent = s.account + "/" + s.db;
      t.length.textContent = plain(s.length);
      t.bytes.textContent = plain(s.bytes);
      t.groups.textContent = plain(s.groups);
      t.pending.textContent = plain(s.pending);
      t.lag.textContent = plain(s.lag);
      t.last_id.textContent = s.last_id;
    }
    for (const [key, item] of elements.streams) {
      if (!seen.has(key)) { item.tr.remove(); elements.streams.delete(key); }
    }
  }

  function renderAccounts(snapshot) {
    const tbody = document.querySelector("#accounts tbody");
    const seen = new Set();
    for (const a of snapshot.accounts) {
      seen.add(a.account);
      const item = row(elements.accounts, a.account, { "data-account": a.account },
        [["account"], ["connections", true], ["subscriptions"]], tbody);
      item.tds.account.textContent = a.account;
      item.tds.connections.textContent = plain(a.connections);
      item.tds.subscriptions.textContent = Object.entries(a.nodes)
        .map(([node, subs]) => node + ": " + plain(subs)).join("  ");
    }
    for (const [key, item] of elements.accounts) {
      if (!seen.has(key)) { item.tr.remove(); elements.accounts.delete(key); }
    }
  }

  function renderEvents(snapshot) {
    const list = document.getElementById("events");
    const items = snapshot.events.slice().reverse().map((e) => {
      const li = el("li", { "data-kind": e.kind });
      li.appendChild(el("time", {}, clock(e.time)));
      li.appendChild(document.createTextNode(e.text));
      return li;
    });
    if (!items.length) items.push(el("li", { class: "muted" }, "none yet"));
    list.replaceChildren(...items);
  }

  function render(snapshot) {
    document.getElementById("observer").textContent = "as seen from " + snapshot.observer;
    document.getElementById("updated").textContent = "updated " + clock(snapshot.time);
    renderNodes(snapshot);
    renderLinks(snapshot);
    renderStreams(snapshot);
    document.getElementById("streams-time").textContent = snapshot.streams_time
      ? "as of " + clock(snapshot.streams_time) : "";
    renderAccounts(snapshot);
    renderEvents(snapshot);
  }

  // -- the event stream (EventSource reconnects by itself) ---------------------------------------

  const status = document.getElementById("connection");
  function connection(state, text) {
    status.setAttribute("data-connection", state);
    status.textContent = text;
  }
  // EventSource reconnects by itself after a dropped stream; after a refusal (503: too many
  // viewers) it gives up, so then a new one is opened a few seconds later.
  function listen() {
    const source = new EventSource("dashboard/events");
    source.addEventListener("open", () => connection("open", "live"));
    source.addEventListener("error", () => {
      if (source.readyState === EventSource.CLOSED) {
        connection("lost", "refused, retrying in 5 s…");
        setTimeout(listen, 5000);
      } else {
        connection("lost", "connection lost, retrying…");
      }
    });
    source.addEventListener("history", (event) => {
      const history = JSON.parse(event.data);
      for (const kind of ["nodes", "links"]) {
        histories[kind].clear();
        for (const [key, points] of Object.entries(history[kind])) histories[kind].set(key, points);
      }
    });
    source.addEventListener("snapshot", (event) => render(JSON.parse(event.data)));
  }
  listen();
})();
