"""Throwaway certificates for TLS tests, made by ``deploy/make-certs`` (the deployment's own script)
and the ``openssl`` command."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path
from typing import Any

import attrs

from transport.tls import TlsConfig

MAKE_CERTS = Path(__file__).resolve().parents[1] / "deploy" / "make-certs"


@attrs.frozen
class Certs:
    """A directory made by ``deploy/make-certs``: ``ca.pem`` and a certificate per name."""

    dir: Path

    @property
    def ca(self) -> str:
        return str(self.dir / "ca.pem")

    def cert(self, name: str) -> str:
        return str(self.dir / f"{name}.pem")

    def key(self, name: str) -> str:
        return str(self.dir / f"{name}-key.pem")

    def tls(self, name: str, **changes: Any) -> TlsConfig:
        """Settings presenting ``name``'s certificate and trusting this CA."""
        return TlsConfig(cert_file=self.cert(name), key_file=self.key(name), ca_file=self.ca, **changes)

    def client_context(self, name: str | None = None) -> ssl.SSLContext:
        """A client's context trusting this CA, presenting ``name``'s certificate if given."""
        context = ssl.create_default_context(cafile=self.ca)
        if name is not None:
            context.load_cert_chain(self.cert(name), self.key(name))
        return context

    def add_client(self, name: str, subject: str, email: str) -> None:
        """A client certificate signed by this CA, for ``subject`` (``/O=x/CN=y``) with an e-mail
        address as its only alternative name."""
        key, request = self.key(name), self.dir / f"{name}.csr"
        extensions = self.dir / f"{name}.ext"
        extensions.write_text(f"extendedKeyUsage = clientAuth\nsubjectAltName = email:{email}\n")
        run("req", "-new", "-nodes", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-keyout", key, "-out", str(request), "-subj", subject)  # fmt: skip
        ca_key = str(self.dir / "ca-key.pem")
        run("x509", "-req", "-in", str(request), "-CA", self.ca, "-CAkey", ca_key, "-CAcreateserial",
            "-days", "2", "-out", self.cert(name), "-extfile", str(extensions))  # fmt: skip

    def subject(self, name: str) -> str:
        """The certificate's subject as OpenSSL prints it in RFC 2253 form."""
        out = run("x509", "-in", self.cert(name), "-noout", "-subject", "-nameopt", "RFC2253")
        return out.strip().removeprefix("subject=")


def run(*args: str) -> str:
    return subprocess.run(["openssl", *args], capture_output=True, text=True, check=True).stdout


def make_certs(directory: Path, *names: str) -> Certs:
    """A fresh CA in ``directory`` and a certificate (for ``CN=name``, naming ``name``, localhost
    and 127.0.0.1) per name."""
    subprocess.run([str(MAKE_CERTS), str(directory), *names], capture_output=True, check=True)
    return Certs(directory)
