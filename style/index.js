import './base.css';
import './graph.css';
import './lab.css';
