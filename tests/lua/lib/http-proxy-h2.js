// Helper servers for tests/lua/http-options.lua, run with node:
//   node http-proxy-h2.js PORTFILE [CERT KEY]
// - a forward proxy (plain http: absolute-URI requests, answered with
//   "x-proxied: yes" added; https: CONNECT tunnels, counted), whose own
//   GET /stats answers {"connects": n, "forwarded": n, "targets": [...]};
// - with CERT and KEY: an HTTP/2 server over TLS (HTTP/1.1 allowed) that
//   answers "<httpVersion> <path>" with an "X-Mixed-Case" header, and
//   redirects /r to /final with a 302.
// Writes {"proxy": port, "h2": port} to PORTFILE once listening.
"use strict";
const http = require("http");
const http2 = require("http2");
const net = require("net");
const fs = require("fs");

const [portfile, certf, keyf] = process.argv.slice(2);
const stats = { connects: 0, forwarded: 0, targets: [] };
const ports = {};

const proxy = http.createServer((req, res) => {
  if (!/^http:\/\//.test(req.url)) {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify(stats));
    return;
  }
  stats.forwarded++;
  stats.targets.push(req.url);
  const up = http.request(req.url, { method: req.method, headers: req.headers }, (ur) => {
    res.writeHead(ur.statusCode, Object.assign({}, ur.headers, { "x-proxied": "yes" }));
    ur.pipe(res);
  });
  up.on("error", (e) => { res.writeHead(502); res.end(String(e)); });
  req.pipe(up);
});
proxy.on("connect", (req, sock, head) => {
  stats.connects++;
  stats.targets.push("CONNECT " + req.url);
  const [host, port] = req.url.split(":");
  const up = net.connect(Number(port), host, () => {
    sock.write("HTTP/1.1 200 Connection Established\r\n\r\n");
    if (head.length) up.write(head);
    up.pipe(sock);
    sock.pipe(up);
  });
  up.on("error", () => sock.destroy());
  sock.on("error", () => up.destroy());
});

function ready() {
  if (ports.proxy && (ports.h2 || !certf)) {
    fs.writeFileSync(portfile + ".tmp", JSON.stringify(ports));
    fs.renameSync(portfile + ".tmp", portfile);
  }
}

proxy.listen(0, "127.0.0.1", () => { ports.proxy = proxy.address().port; ready(); });

if (certf) {
  const h2 = http2.createSecureServer(
    { cert: fs.readFileSync(certf), key: fs.readFileSync(keyf), allowHTTP1: true },
    (req, res) => {
      if (req.url === "/r") {
        res.writeHead(302, { location: "/final" });
        res.end("moved");
        return;
      }
      res.writeHead(200, { "content-type": "text/plain", "X-Mixed-Case": "yes" });
      res.end(req.httpVersion + " " + req.url);
    });
  h2.listen(0, "127.0.0.1", () => { ports.h2 = h2.address().port; ready(); });
}
