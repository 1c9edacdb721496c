import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["dist/**", "build/**", "node_modules/**", "bench/results/**"] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ["**/*.ts"],
    rules: {
      "@typescript-eslint/no-unused-vars": [
        "error",
        { argsIgnorePattern: "^_", varsIgnorePattern: "^_" },
      ],
      "no-constant-condition": ["error", { checkLoops: false }],
    },
  },
  {
    files: ["scripts/**/*.mjs", "eslint.config.js"],
    languageOptions: { globals: { process: "readonly", console: "readonly", URL: "readonly" } },
  },
  {
    // The console's page script (a browser's, served as a file).
    files: ["src/console/static/*.js"],
    languageOptions: {
      sourceType: "script",
      globals: Object.fromEntries(
        [
          "fetch",
          "location",
          "confirm",
          "URLSearchParams",
          "document",
          "atob",
          "URL",
          "Blob",
          "clearInterval",
          "setInterval",
          "window",
          "Node",
        ].map((g) => [g, "readonly"]),
      ),
    },
  },
  {
    // The MCP Apps result view's script (a browser's, inlined into the view's one HTML page).
    files: ["src/mcp/view/*.js"],
    languageOptions: {
      sourceType: "script",
      globals: Object.fromEntries(
        [
          "window",
          "document",
          "URL",
          "Blob",
          "TextEncoder",
          "atob",
          "setTimeout",
          "ResizeObserver",
        ].map((g) => [g, "readonly"]),
      ),
    },
  },
  {
    // The pre-started and session node scripts (CommonJS, run by node in the guest).
    files: ["guest/prestart.js", "guest/session.js"],
    languageOptions: {
      sourceType: "commonjs",
      globals: {
        process: "readonly",
        console: "readonly",
        Buffer: "readonly",
        require: "readonly",
        module: "readonly",
        __dirname: "readonly",
        setImmediate: "readonly",
        setTimeout: "readonly",
      },
    },
    rules: { "@typescript-eslint/no-require-imports": "off" },
  },
);
