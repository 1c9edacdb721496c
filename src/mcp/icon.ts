/**
 * The server's icon, as clients show it beside its name (the `icons` of its identity, both eras).
 * A data URI: an icon a client must fetch from a host would tell that host who starts the server,
 * and a local server may have no network at all.
 */
const SVG =
  '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 64 64">' +
  '<rect width="64" height="64" rx="14" fill="#0f766e"/>' +
  '<path d="M16 22l12 10-12 10" fill="none" stroke="#fff" stroke-width="5" ' +
  'stroke-linecap="round" stroke-linejoin="round"/>' +
  '<path d="M32 44h16" stroke="#fff" stroke-width="5" stroke-linecap="round"/></svg>';

export const SERVER_ICONS = [
  {
    src: `data:image/svg+xml;base64,${Buffer.from(SVG).toString("base64")}`,
    mimeType: "image/svg+xml",
    sizes: ["any"],
  },
];
