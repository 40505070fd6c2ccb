"""Each region's network namespace and its links, and the userspace proxy at the host end of
each link (delay and loss without the kernel's netem)."""

import random
import socket
import subprocess
import threading
import time

HANDED_OUT = set()


class NoNamespaces(Exception):
    """Network namespaces could not be made; the message says what is missing."""


def free_port():
    """A port free on the host and not handed out before: the namespaces' ports are not seen
    from the host, so a port free here may already serve in a region."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in HANDED_OUT:
            HANDED_OUT.add(port)
            return port


def sh(*cmd, check=True):
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


class Proxy:
    """A TCP proxy: `delay_s` on every chunk, `loss` the chance that a chunk resets its
    connection (a lossy link seen from TCP: stalls and resets), `cut` refuses and drops all
    (only with --loopback, where there is no link to take down)."""

    def __init__(self, listen, upstream):
        self.upstream = upstream
        self.delay_s = 0.0
        self.loss = 0.0
        self.cut = False
        self.rng = random.Random(hash(listen))
        self.conns = []
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(listen)
        self.sock.listen(256)
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            if self.cut:
                client.close()
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.conns.append((client, server))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self.pipe, args=(a, b), daemon=True).start()

    def pipe(self, src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data or self.cut:
                    break
                if self.delay_s:
                    time.sleep(self.delay_s)
                if self.loss and self.rng.random() < self.loss:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def drop_all(self):
        with self.lock:
            conns, self.conns = self.conns, []
        for pair in conns:
            for s in pair:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class Net:
    """Each region's namespace and its two links (`netns`), or, with `loopback` (for
    development only), loopback proxies: partitions are then proxy cuts, and the Sentinel
    announces unproxied nodes, so `cut-redis` and `lossy-redis` never touch the Redis data
    path. Without `loopback`, a namespace that cannot be made fails the run."""

    def __init__(self, tag, regions, loopback):
        self.tag = tag
        self.regions = regions
        self.netns = not loopback
        if loopback:
            return
        try:
            for r in range(regions):
                ns = self.ns(r)
                sh("ip", "netns", "add", ns)
                sh("ip", "-n", ns, "link", "set", "lo", "up")
                for link in ("d", "r"):
                    host, inner = self.veth(r, link), f"{self.veth(r, link)}n"
                    sh("ip", "link", "add", host, "type", "veth", "peer", "name", inner)
                    sh("ip", "link", "set", inner, "netns", ns)
                    sh("ip", "addr", "add", f"{self.subnet(r, link)}.1/30", "dev", host)
                    sh("ip", "-n", ns, "addr", "add", f"{self.subnet(r, link)}.2/30", "dev", inner)
                    sh("ip", "link", "set", host, "up")
                    sh("ip", "-n", ns, "link", "set", inner, "up")
        except (subprocess.CalledProcessError, FileNotFoundError) as e:
            err = (getattr(e, "stderr", "") or str(e)).strip()
            self.cleanup()
            raise NoNamespaces(f"cannot make the regions' network namespaces ({err})") from e

    def ns(self, r):
        return f"chaos{self.tag}r{r}"

    def veth(self, r, link):
        return f"c{self.tag}{link}{r}"

    def subnet(self, r, link):
        # One /16 per run (two runs side by side do not share addresses), one /24 per link.
        return f"10.{20 + self.tag % 200}.{2 * r + (link == 'r')}"

    def host_ip(self, r, link):
        return f"{self.subnet(r, link)}.1" if self.netns else "127.0.0.1"

    def exec_prefix(self, r):
        return ["ip", "netns", "exec", self.ns(r)] if self.netns else []

    def set_link(self, r, link, up):
        if self.netns:
            sh("ip", "link", "set", self.veth(r, link), "up" if up else "down")

    def cleanup(self):
        if not self.netns:
            return
        for r in range(self.regions):
            sh("ip", "netns", "del", self.ns(r), check=False)
            for link in ("d", "r"):
                sh("ip", "link", "del", self.veth(r, link), check=False)
