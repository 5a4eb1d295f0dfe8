// Sidewisp page behaviour. No inline scripts: the CSP forbids them.
"use strict";
