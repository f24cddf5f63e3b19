// Marks dist/cjs as CommonJS, so that Node.js reads the require() entry's .js files as such
// (the package itself is "type": "module").
import { writeFileSync } from "node:fs";
writeFileSync(new URL("../dist/cjs/package.json", import.meta.url), '{\n  "type": "commonjs"\n}\n');
