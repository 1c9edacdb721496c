/**
 * The few X.509 certificates brokered secrets need (docs/decisions/0015-brokered-secrets.md): a
 * call's own CA, and a leaf for each bound host the egress proxy terminates TLS for, signed by
 * it. ECDSA P-256 with SHA-256, written with a minimal DER writer (Node can sign but not build a
 * certificate). Pure but for the keys and serial numbers it draws.
 */
import { createHash, generateKeyPairSync, randomBytes, sign, type KeyObject } from "node:crypto";

/** A DER element: tag, definite length, content. */
function der(tag: number, ...content: Buffer[]): Buffer {
  const body = Buffer.concat(content);
  const n = body.length;
  const len =
    n < 0x80
      ? Buffer.from([n])
      : n < 0x100
        ? Buffer.from([0x81, n])
        : n < 0x10000
          ? Buffer.from([0x82, n >> 8, n & 0xff])
          : Buffer.from([0x83, n >> 16, (n >> 8) & 0xff, n & 0xff]);
  return Buffer.concat([Buffer.from([tag]), len, body]);
}

const seq = (...c: Buffer[]) => der(0x30, ...c);
const octets = (b: Buffer) => der(0x04, b);
const utf8 = (s: string) => der(0x0c, Buffer.from(s, "utf8"));

function oid(dotted: string): Buffer {
  const [a = 0, b = 0, ...rest] = dotted.split(".").map(Number);
  const bytes = [40 * a + b];
  for (const v of rest) {
    const chunk = [v & 0x7f];
    for (let x = Math.floor(v / 128); x > 0; x = Math.floor(x / 128))
      chunk.unshift(0x80 | (x & 0x7f));
    bytes.push(...chunk);
  }
  return der(0x06, Buffer.from(bytes));
}

/** UTCTime (YYMMDDHHMMSSZ): every date these certificates carry is before 2050. */
function utcTime(d: Date): Buffer {
  const s = d.toISOString().replace(/[-:T]/g, "").slice(2, 14);
  return der(0x17, Buffer.from(`${s}Z`, "latin1"));
}

const ECDSA_SHA256 = seq(oid("1.2.840.10045.4.3.2"));
const name = (cn: string) => seq(der(0x31, seq(oid("2.5.4.3"), utf8(cn))));

function extension(id: string, critical: boolean, value: Buffer): Buffer {
  return seq(oid(id), ...(critical ? [der(0x01, Buffer.from([0xff]))] : []), octets(value));
}

/** The key identifier of a public key: SHA-1 of its subjectPublicKey bits (RFC 5280 4.2.1.2). */
function keyId(spki: Buffer): Buffer {
  // A P-256 SPKI is 91 bytes: its last 65 are the uncompressed point.
  return createHash("sha1")
    .update(spki.subarray(spki.length - 65))
    .digest();
}

export interface Issued {
  certPem: string;
  /** The certificate, DER (for fingerprints in tests). */
  certDer: Buffer;
}

interface CertSpec {
  subject: string;
  publicKey: KeyObject;
  issuer: { name: string; key: KeyObject; keyId: Buffer };
  notBefore: Date;
  notAfter: Date;
  ca: boolean;
  /** Leaf: the one DNS name it is for. */
  dnsName?: string;
}

/**
 * A serial number's INTEGER content from random bytes: positive (top bit clear) and minimal (first
 * byte not zero). DER forbids a leading zero byte before one below 0x80; OpenSSL refuses such a
 * certificate ("illegal padding"), which 1 in 256 random serials with only the top bit cleared was.
 */
export function serialNumber(random: Buffer): Buffer {
  const serial = Buffer.from(random);
  serial[0] = 0x40 | ((serial[0] ?? 0) & 0x3f);
  return serial;
}

function issue(spec: CertSpec): Issued {
  const spki = spec.publicKey.export({ type: "spki", format: "der" });
  const serial = serialNumber(randomBytes(16));
  const exts = spec.ca
    ? [
        extension("2.5.29.19", true, seq(der(0x01, Buffer.from([0xff])))),
        // keyCertSign, cRLSign
        extension("2.5.29.15", true, der(0x03, Buffer.from([0x01, 0x06]))),
        extension("2.5.29.14", false, octets(keyId(spki))),
      ]
    : [
        extension("2.5.29.19", true, seq()),
        // digitalSignature
        extension("2.5.29.15", true, der(0x03, Buffer.from([0x07, 0x80]))),
        extension("2.5.29.37", false, seq(oid("1.3.6.1.5.5.7.3.1"))),
        extension("2.5.29.17", false, seq(der(0x82, Buffer.from(spec.dnsName ?? "", "latin1")))),
        extension("2.5.29.14", false, octets(keyId(spki))),
        extension("2.5.29.35", false, seq(der(0x80, spec.issuer.keyId))),
      ];
  const tbs = seq(
    der(0xa0, der(0x02, Buffer.from([2]))),
    der(0x02, serial),
    ECDSA_SHA256,
    name(spec.issuer.name),
    seq(utcTime(spec.notBefore), utcTime(spec.notAfter)),
    name(spec.subject),
    spki,
    der(0xa3, seq(...exts)),
  );
  const signature = sign("sha256", tbs, spec.issuer.key);
  const certDer = seq(tbs, ECDSA_SHA256, der(0x03, Buffer.from([0]), signature));
  const b64 = certDer.toString("base64").replace(/.{64}/g, "$&\n");
  return {
    certDer,
    certPem: `-----BEGIN CERTIFICATE-----\n${b64.trimEnd()}\n-----END CERTIFICATE-----\n`,
  };
}

/**
 * How long a call's certificates are valid around now: an hour back (a guest clock a little
 * behind) and two ahead (past any call's timeout); the CA's key is dropped with the call anyway.
 */
const BACK_MS = 60 * 60_000;
const AHEAD_MS = 2 * 60 * 60_000;

export interface CallCa {
  certPem: string;
  /** PKCS#8 PEM: stays on the host, handed to the egress proxy only. */
  keyPem: string;
}

/** A fresh CA for one call: its own P-256 key, CA:true, a name that says what it is. */
export function newCallCa(now = new Date()): CallCa {
  const { privateKey, publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const spki = publicKey.export({ type: "spki", format: "der" });
  const cn = `ScratchRun brokered secrets CA ${randomBytes(4).toString("hex")}`;
  const { certPem } = issue({
    subject: cn,
    publicKey,
    issuer: { name: cn, key: privateKey, keyId: keyId(spki) },
    notBefore: new Date(now.getTime() - BACK_MS),
    notAfter: new Date(now.getTime() + AHEAD_MS),
    ca: true,
  });
  return { certPem, keyPem: privateKey.export({ type: "pkcs8", format: "pem" }).toString() };
}

/** Issues leaves for one name at a time under a call's CA (the CA's subject is read from it). */
export class LeafIssuer {
  private readonly leafKey = generateKeyPairSync("ec", { namedCurve: "P-256" });
  readonly leafKeyPem: string;

  constructor(
    private readonly caKey: KeyObject,
    private readonly caName: string,
    private readonly caKeyId: Buffer,
  ) {
    this.leafKeyPem = this.leafKey.privateKey.export({ type: "pkcs8", format: "pem" }).toString();
  }

  leaf(dnsName: string, now = new Date()): Issued {
    return issue({
      subject: dnsName,
      publicKey: this.leafKey.publicKey,
      issuer: { name: this.caName, key: this.caKey, keyId: this.caKeyId },
      notBefore: new Date(now.getTime() - BACK_MS),
      notAfter: new Date(now.getTime() + AHEAD_MS),
      ca: false,
      dnsName,
    });
  }
}

/** The key identifier of a P-256 public key (the CA's, for its leaves' authority key id). */
export function publicKeyId(key: KeyObject): Buffer {
  return keyId(key.export({ type: "spki", format: "der" }));
}
